"""Great Expectations 1.x behind an error boundary (the only module that imports it).

What GX gets and does here:

* an **ephemeral** Data Context: suites, validation definitions and results live in memory
  for one report run, so runs never see each other's state and two runs into the same
  report directory both work. Its only file output is the Data Docs site, written under
  ``<report_dir>/data_docs``. Analytics are disabled in the context's configuration, and
  nothing in it needs the network; neither do the pages, which load the CSS/JS shipped with
  lakehouse instead of GX's CDNs (:mod:`lakehouse.quality._offline`).
* one **datasource** of the report's engine (:mod:`lakehouse.quality.frames`) whose dataframe
  assets are filled per run (``batch_parameters={"dataframe": df}``). A Spark datasource is
  created with ``persist=False`` so GX does not cache DataFrames in the caller's session, and
  without ``spark_config``, so it uses the caller's active SparkSession as it is (GX stops and
  restarts a session only to apply a ``spark_config``); a pandas datasource needs no JVM.
* **suites loaded from JSON files** a reviewer can read (``expectations/*.json``). Each
  expectation's ``meta.notes`` explains it; the loader copies the notes into GX's ``notes``
  field, which is what the Data Docs render.

Every call into GX runs inside :func:`gx_boundary`: GX's loggers are raised to CRITICAL and its
warnings are captured (and logged at DEBUG on ``lakehouse.quality``) for the duration, and any
exception other than a :class:`~lakehouse.errors.LakehouseError` is re-raised as
:class:`~lakehouse.quality.errors.QualityError` ``from`` the original.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.errors import LakehouseError
from lakehouse.quality._offline import make_site_offline
from lakehouse.quality.errors import QualityError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

log = logging.getLogger("lakehouse.quality")

#: Environment variable naming the directory of the suite files (default: the repository's
#: ``expectations/`` directory).
SUITES_DIR_ENV = "LAKEHOUSE_EXPECTATIONS_DIR"

#: Name of the Data Docs site, and its directory under the report directory.
DOCS_SITE = "lakehouse_quality"
DOCS_DIR = "data_docs"
#: Run name of the validations in the Data Docs.
RUN_NAME = "lakehouse-quality"

# Loggers of third-party code that runs inside the boundary.
_QUIET_LOGGERS = ("great_expectations", "py4j")


def default_suites_dir() -> Path:
    """The directory of the suite files: ``$LAKEHOUSE_EXPECTATIONS_DIR``, else the suites
    shipped with the package (``lakehouse/quality/suites``, which the repository's
    ``expectations/`` links to, so an installed wheel has them too)."""
    configured = os.environ.get(SUITES_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent / "suites"


@contextlib.contextmanager
def gx_boundary(stage: str) -> Iterator[None]:
    """Run third-party (GX) code quietly; re-raise its failures as :class:`QualityError`.

    Args:
        stage: what is being done, for the error message ("running suite 'pending_age'").

    Raises:
        QualityError: GX raised; the original exception is the ``__cause__``.
    """
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield
            except LakehouseError:
                # part of lakehouse's contract already (a check, a config error): not GX's
                raise
            except Exception as e:
                raise QualityError(
                    f"Great Expectations failed while {stage}: {type(e).__name__}: {e}",
                    stage=stage,
                ) from e
        for w in caught:
            log.debug("%s while %s: %s", w.category.__name__, stage, w.message)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@dataclass(frozen=True, slots=True)
class SuiteFile:
    """A suite as read from its JSON file.

    Attributes:
        name: the suite's name (also its file's stem).
        path: the file.
        content: the parsed JSON (``name``, ``meta``, ``expectations``).
    """

    name: str
    path: Path
    content: Mapping[str, Any]


def load_suite_file(suites_dir: Path, name: str) -> SuiteFile:
    """Read and check ``<suites_dir>/<name>.json``.

    Contract of a suite file: a JSON object with ``name`` equal to the file's stem, a
    ``meta.notes`` string, and a non-empty ``expectations`` list whose items each have a
    ``type``, a ``kwargs`` object and a ``meta.notes`` string.

    Raises:
        QualityError: the file is missing, is not JSON, or breaks the contract; the message
            names the file and what is wrong.
    """
    path = suites_dir / f"{name}.json"
    stage = f"loading suite '{name}'"
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise QualityError(
            f"suite file '{path}' not found; point {SUITES_DIR_ENV} (or suites_dir) at the "
            "directory holding the expectations/*.json suites",
            stage=stage,
        ) from e
    except (OSError, ValueError) as e:
        raise QualityError(f"suite file '{path}' is not readable JSON: {e}", stage=stage) from e

    def bad(what: str) -> QualityError:
        return QualityError(f"suite file '{path}': {what}", stage=stage)

    if not isinstance(content, dict) or content.get("name") != name:
        raise bad(f'must be a JSON object with "name": "{name}"')
    if not isinstance(content.get("meta", {}).get("notes"), str):
        raise bad("meta.notes must explain the suite's concern")
    expectations = content.get("expectations")
    if not isinstance(expectations, list) or not expectations:
        raise bad("expectations must be a non-empty list")
    for i, exp in enumerate(expectations):
        if not isinstance(exp, dict) or not isinstance(exp.get("type"), str):
            raise bad(f'expectation #{i} has no "type"')
        if not isinstance(exp.get("kwargs"), dict):
            raise bad(f'expectation #{i} ({exp["type"]}) has no "kwargs" object')
        if not isinstance(exp.get("meta", {}).get("notes"), str):
            raise bad(f"expectation #{i} ({exp['type']}) has no meta.notes explaining it")
    return SuiteFile(name=name, path=path, content=content)


@dataclass(frozen=True, slots=True)
class ExpectationOutcome:
    """One expectation's result, reduced to JSON-friendly values.

    Attributes:
        type: the expectation type (``expect_column_values_to_be_unique``).
        kwargs: its resolved arguments (suite parameters substituted).
        success: whether it held.
        result: GX's ``result`` dict (counts, observed value, partial unexpected lists).
    """

    type: str
    kwargs: Mapping[str, Any]
    success: bool
    result: Mapping[str, Any]

    @property
    def unexpected_rows(self) -> list[dict[str, Any]]:
        """The sample of failing rows GX returned (``partial_unexpected_index_list``)."""
        return [dict(r) for r in self.result.get("partial_unexpected_index_list") or []]


class GxSession:
    """An ephemeral GX Data Context for one report run, writing Data Docs under a directory.

    Not thread-safe; create one per run. Each method runs inside :func:`gx_boundary`.

    Args:
        docs_dir: the Data Docs site's directory (created when docs are built).
        engine: the frames :meth:`validate` is given: ``spark`` or ``pandas`` DataFrames.
    """

    def __init__(self, docs_dir: Path, *, engine: Literal["spark", "pandas"] = "spark") -> None:
        self.docs_dir = docs_dir
        # GX 1.x reads this when it is imported; the context config below disables analytics
        # too. An operator's explicit setting is left alone.
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        with gx_boundary("creating the Data Context"):
            import great_expectations as gx
            from great_expectations.core.run_identifier import RunIdentifier
            from great_expectations.data_context.types.base import (
                DataContextConfig,
                InMemoryStoreBackendDefaults,
                ProgressBarsConfig,
            )

            config = DataContextConfig(
                store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
                data_docs_sites={
                    DOCS_SITE: {
                        "class_name": "SiteBuilder",
                        "show_how_to_buttons": False,
                        "store_backend": {
                            "class_name": "TupleFilesystemStoreBackend",
                            "base_directory": str(docs_dir),
                        },
                        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                    }
                },
                analytics_enabled=False,
                progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
            )
            self._gx = gx
            self.context = gx.get_context(mode="ephemeral", project_config=config)
            sources = self.context.data_sources
            self._datasource = (
                sources.add_spark(name="lakehouse", persist=False)
                if engine == "spark"
                else sources.add_pandas(name="lakehouse")
            )
            # one run id for all validations of the report, so the Data Docs group them
            self._run_id = RunIdentifier(run_name=RUN_NAME, run_time=datetime.now(UTC))
        self._batch_definitions: dict[str, Any] = {}
        self._described: dict[str, str] = {}  # suite name -> what its asset is, for the pages

    def _batch_definition(self, asset: str) -> Any:
        if asset not in self._batch_definitions:
            data_asset = self._datasource.add_dataframe_asset(name=asset)
            self._batch_definitions[asset] = data_asset.add_batch_definition_whole_dataframe(
                "whole dataframe"
            )
        return self._batch_definitions[asset]

    def validate(
        self,
        suite: SuiteFile,
        *,
        asset: str,
        df: DataFrame | pd.DataFrame,
        parameters: Mapping[str, Any] | None = None,
        index_columns: Sequence[str] = (),
        sample_rows: int = 20,
        described: str | None = None,
    ) -> list[ExpectationOutcome]:
        """Validate ``df`` (as dataframe asset ``asset``) against ``suite``.

        Args:
            suite: the suite file; its ``$PARAMETER`` references are filled from
                ``parameters``.
            asset: name of the dataframe asset (shown in the Data Docs).
            df: the rows (a frame of the session's engine); not cached by GX.
            parameters: suite parameter values.
            index_columns: columns identifying a failing row in the sample
                (``unexpected_index_column_names``).
            sample_rows: failing rows kept per expectation.
            described: what the asset is (e.g. the table and version), shown as the page's
                "Data asset" (GX shows None for a dataframe asset); default ``asset``.

        Returns:
            One outcome per expectation, in the suite's order. The result is also stored for
            the Data Docs.

        Raises:
            QualityError: GX failed, dropped an expectation of the file as invalid, or an
                expectation raised while computing (e.g. a missing column).
        """
        stage = f"running suite '{suite.name}' on asset '{asset}'"
        with gx_boundary(stage):
            gx = self._gx
            # copies: GX may annotate what it is given, and the SuiteFile is reused
            expectations = [
                {**copy.deepcopy(exp), "notes": exp["meta"]["notes"]}
                for exp in suite.content["expectations"]
            ]
            gx_suite = gx.ExpectationSuite(
                name=suite.name,
                expectations=expectations,
                meta=copy.deepcopy(dict(suite.content["meta"])),
                notes=suite.content["meta"]["notes"],
            )
            if len(gx_suite.expectations) != len(expectations):
                # GX logs and drops expectations it cannot build; a suite must not shrink
                raise QualityError(
                    f"suite file '{suite.path}': Great Expectations rejected "
                    f"{len(expectations) - len(gx_suite.expectations)} of its expectations as "
                    "invalid; check their types and kwargs against GX 1.x",
                    stage=stage,
                )
            gx_suite = self.context.suites.add(gx_suite)
            self._described[suite.name] = described or asset
            definition = self.context.validation_definitions.add(
                gx.ValidationDefinition(
                    name=suite.name, data=self._batch_definition(asset), suite=gx_suite
                )
            )
            result_format: dict[str, Any] = {
                "result_format": "SUMMARY",
                "partial_unexpected_count": sample_rows,
            }
            if index_columns:
                result_format["unexpected_index_column_names"] = list(index_columns)
            run = definition.run(
                batch_parameters={"dataframe": df},
                expectation_parameters=dict(parameters) if parameters else None,
                result_format=result_format,
                run_id=self._run_id,
            )
            outcomes = []
            for r in run.results:
                info = r.exception_info or {}
                kind = r.expectation_config.type if r.expectation_config is not None else "?"
                if info.get("raised_exception"):
                    raise QualityError(
                        f"suite '{suite.name}', {kind}: Great Expectations "
                        f"could not evaluate it: {info.get('exception_message')}",
                        stage=stage,
                    )
                as_json: dict[str, Any] = dict(r.to_json_dict())
                result: dict[str, Any] = as_json.get("result") or {}
                # the same summary whichever engine validated: without index columns pandas
                # lists bare row numbers, which identify nothing (Spark lists none); over a
                # domain no row is in (a row condition none meets) Spark counts None
                # unexpected, pandas 0
                if not index_columns:
                    result.pop("partial_unexpected_index_list", None)
                if result.get("element_count") == 0 and result.get("unexpected_count") is None:
                    result["unexpected_count"] = 0
                outcomes.append(
                    ExpectationOutcome(
                        type=kind,
                        kwargs=as_json["expectation_config"]["kwargs"],
                        success=bool(r.success),
                        result=result,
                    )
                )
            return outcomes

    def build_docs(self) -> Path:
        """Build the Data Docs site from this run's results; return its ``index.html``.

        The site works offline: its pages load the CSS/JS shipped with lakehouse from
        ``static/vendor/`` instead of GX's CDNs
        (:func:`~lakehouse.quality._offline.make_site_offline`), so the directory can be
        opened, zipped or moved anywhere.

        Raises:
            QualityError: GX failed or wrote no index, or a page loads a remote script or
                stylesheet lakehouse has no copy of (a GX upgrade that added one: vendor it
                with ``scripts/vendor_datadocs_assets.py``).
        """
        with gx_boundary("building the Data Docs"):
            self._name_the_assets()
            self.context.build_data_docs(site_names=[DOCS_SITE])
        index = self.docs_dir / "index.html"
        if not index.is_file():
            raise QualityError(
                f"Great Expectations built no Data Docs index at '{index}'",
                stage="building the Data Docs",
            )
        make_site_offline(self.docs_dir)
        return index

    def _name_the_assets(self) -> None:
        """Put each result's asset description where the page renderer reads the "Data
        asset" (``meta.batch_spec.data_asset_name``): a dataframe batch has none."""
        store = self.context.validation_results_store
        key: Any  # ValidationResultIdentifier
        for key in store.list_keys():
            result: Any = store.get(key)
            described = self._described.get(key.expectation_suite_identifier.name)
            spec = result.meta.get("batch_spec")
            if described is None or spec is None:
                continue
            spec["data_asset_name"] = described
            store.set(key, result)
