"""MkDocs hook: the references that are generated from the code, so they cannot drift.

A page asks for one with a marker line:

* ``<!-- reference: cli -->``: every command, its arguments and flags, as ``lakehouse --help``
  shows them (Typer's own Markdown generator, ``typer lakehouse.cli utils docs``);
* ``<!-- reference: settings -->``: every setting of the configuration file, its type, default
  and meaning, from the pydantic models of :mod:`lakehouse.config` (a field's docstring is its
  meaning).

A page that asks for an unknown reference fails the build.
"""

from __future__ import annotations

import re
import subprocess
import sys
import types
import typing
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_MARKER = re.compile(r"^<!-- reference: ([a-z]+) -->$", re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each reference marker of a page with the generated reference."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in _REFERENCES:
            raise ValueError(f"unknown reference {name!r}; known: {sorted(_REFERENCES)}")
        return _REFERENCES[name]()

    return _MARKER.sub(generated, markdown)


@cache
def cli_reference() -> str:
    """The command line, from the Typer application itself, one level below the page title."""
    out = subprocess.run(
        [sys.executable, "-m", "typer", "lakehouse.cli", "utils", "docs", "--name", "lakehouse"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # Typer titles the program `# lakehouse` and each command `## lakehouse X`: the page has
    # its own title, so every heading moves one level down
    out = re.sub(r"^(#+) ", r"#\1 ", out, flags=re.M)
    # the list of commands cuts each summary at 45 characters: give the whole first line
    import typer.main

    from lakehouse.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]

    def summary(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in commands:  # an option, not a command
            return match.group(0)
        first = (commands[name].help or "").strip().split("\n")[0]
        return f"* [`{name}`](#lakehouse-{name}): {first}"

    return re.sub(r"^\* `([a-z-]+)`: .*$", summary, out, flags=re.M)


@cache
def settings_reference() -> str:
    """One table per section of the configuration file."""
    from lakehouse.config import (
        IngestConfig,
        IngestTableConfig,
        JoinConfig,
        KafkaConfig,
        MaintenanceConfig,
        MonitoringConfig,
        QualityConfig,
        SparkConfig,
    )

    sections: list[tuple[str, type[BaseModel], set[str]]] = [
        ("spark", SparkConfig, set()),
        ("kafka", KafkaConfig, set()),
        ("ingest", IngestConfig, {"tables"}),
        ("ingest.tables", IngestTableConfig, set()),
        ("join", JoinConfig, set()),
        ("quality", QualityConfig, set()),
        ("maintenance", MaintenanceConfig, set()),
        ("monitoring", MonitoringConfig, set()),
    ]
    parts = []
    for section, model, skipped in sections:
        header = f"[[{section}]]" if section == "ingest.tables" else f"[{section}]"
        doc = (model.__doc__ or "").strip().split("\n\n")[0]
        rows = [
            "| setting | type | default | meaning |",
            "|---|---|---|---|",
        ]
        for name, field in model.model_fields.items():
            if name in skipped:
                continue
            meaning = " ".join((field.description or "").split())
            if not meaning:
                raise ValueError(f"setting {section}.{name} has no docstring (its meaning)")
            rows.append(
                f"| `{name}` | {_type(field.annotation, field.metadata)} | "
                f"{_default(field)} | {_cell(meaning)} |"
            )
        env = f"LAKEHOUSE_{section.upper().replace('.', '__')}__<SETTING>"
        where = (
            "Each entry is one build table (no environment variables; flags set one)."
            if section == "ingest.tables"
            else f"Environment: `{env}`."
        )
        parts.append(
            f"## `{header}`\n\n{_cell(' '.join(doc.split()))} {where}\n\n" + "\n".join(rows)
        )
    return "\n\n".join(parts) + "\n"


_REFERENCES = {"cli": cli_reference, "settings": settings_reference}


def _type(annotation: Any, metadata: list[Any]) -> str:
    """A setting's type in words, with its bounds (``integer ≥ 0``)."""
    text = _type_name(annotation)
    for bound in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(bound, attr, None)
            if value is not None:
                text += f" {sign} {value}"
    return text


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' for a in typing.get_args(annotation))
    if origin in (list, tuple):  # a tuple[str, ...] setting is a TOML list too
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "table of strings"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    raise ValueError(f"no name for the setting type {annotation!r}")


def _default(field: Any) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is None or value in ({}, [], ()):
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Docstring text for a Markdown table cell: Sphinx roles and double backquotes become
    code spans, and a ``|`` would end the cell."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`").replace("|", "\\|")
