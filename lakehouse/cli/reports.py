"""``lakehouse quality``, ``lakehouse demo`` and ``lakehouse smoke``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from lakehouse.cli._app import ConfigOpt, app, console
from lakehouse.cli._shared import (
    flag_overrides,
    spark_for,
    with_locations,
)
from lakehouse.errors import ConfigError
from lakehouse.join.layout import META_BATCH_ID

# --------------------------------------------------------------------------------- quality


@app.command()
def quality(
    config: ConfigOpt = None,
    report_dir: Annotated[str | None, typer.Option(help="Where to write the report.")] = None,
    max_pending_age_ms: Annotated[
        int | None, typer.Option(help="Fail when a pending row is older than this.")
    ] = None,
    engine: Annotated[
        Literal["auto", "pandas", "spark"] | None,
        typer.Option(
            help="pandas (delta-rs, no JVM; local tables), spark, or auto: pandas when every "
            "table is local [default: auto]"
        ),
    ] = None,
) -> None:
    """Validate the join's output and pending tables with Great Expectations.

    Local tables are validated on pandas in seconds (no JVM); tables on object storage on
    Spark. Exit code 1 when a check fails, for cron or a Databricks job to alert on."""
    from lakehouse.config import load_settings
    from lakehouse.quality import choose_engine, print_report, run_quality_report
    from lakehouse.runner import check_join_key, check_table_kinds, join_options

    settings = load_settings(
        config,
        overrides={
            "quality": flag_overrides(
                report_dir=report_dir, max_pending_age_ms=max_pending_age_ms, engine=engine
            )
        },
    )
    settings = with_locations(settings)
    j = settings.join
    if j is None:
        raise ConfigError(
            "lakehouse quality validates a join: the configuration needs a [join] section",
            setting="join",
        )
    if not j.probe_id:
        raise ConfigError(
            "lakehouse quality needs join.probe_id (a column identifying each probe row)",
            setting="join.probe_id",
        )
    check_table_kinds(settings, "join")  # before Spark starts
    check_join_key(settings)
    options = join_options(j)
    on = choose_engine(options, settings.quality.engine)
    report = run_quality_report(
        spark_for(settings) if on == "spark" else None,
        options,
        report_dir=settings.quality.report_dir,
        max_pending_age_ms=settings.quality.max_pending_age_ms,
        engine=on,
    )
    print_report(report, console=console)
    if not report.success:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------ demo


@app.command()
def demo(
    source: Annotated[
        str,
        typer.Option(
            help="kafka (generated CDC records, embedded broker), files, or postgres (a real "
            "PostgreSQL database and Debezium's connector in Kafka Connect; needs PostgreSQL's "
            "server installed)."
        ),
    ] = "kafka",
    output: Annotated[Path, typer.Option(help="Output directory (cleared first).")] = Path(
        "demo-output"
    ),
    orders: Annotated[int, typer.Option(help="How many orders to produce.")] = 1200,
) -> None:
    """Run the product end to end on generated data.

    CDC ingest and both joins, then the quality report and a summary."""
    from lakehouse.demo import run_demo

    if source not in ("kafka", "files", "postgres"):
        raise ConfigError(
            f"--source must be 'kafka', 'files' or 'postgres', got {source!r}", setting="source"
        )
    code = run_demo(source=source, output=output, orders=orders, console=console)  # type: ignore[arg-type]
    if code:
        raise typer.Exit(code)


# ------------------------------------------------------------------------------ smoke test


@app.command()
def smoke(
    directory: Annotated[Path, typer.Option(help="Where to write the table.")] = Path(
        "demo-output/smoke"
    ),
) -> None:
    """Start Spark, write a Delta table, read it back, and say what happened."""
    import shutil

    from lakehouse import delta
    from lakehouse.spark import get_spark

    started = time.monotonic()
    spark = get_spark(app_name="lakehouse-smoke")
    console.print(
        f"Spark {spark.version} up in {time.monotonic() - started:.1f}s "
        f"(master {spark.sparkContext.master})"
    )
    shutil.rmtree(directory, ignore_errors=True)
    uri = str(directory / "table")
    df = spark.sql("SELECT id, CAST(id * 1.5 AS DECIMAL(10, 2)) AS amount FROM range(5)")
    result = delta.append(df, uri, txn=("smoke", 0), metadata={META_BATCH_ID: 0})
    replay = delta.append(df, uri, txn=("smoke", 0))
    back = delta.read(spark, uri).orderBy("id").collect()
    console.print(
        f"wrote {result.rows} rows as Delta version {result.version} at {uri}; "
        f"replaying the same transaction {'was skipped' if replay.skipped else 'was NOT skipped'}"
        f"; read back {len(back)} rows: {[tuple(r) for r in back]}"
    )
    console.print(f"done in {time.monotonic() - started:.1f}s")
