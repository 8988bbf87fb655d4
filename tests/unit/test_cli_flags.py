"""The streaming commands' flags are the settings' own: each flag that overrides a setting
takes its help and its type from the setting's declaration, so the two cannot drift."""

from __future__ import annotations

import types
import typing

import pytest
import typer.main
from pydantic import BaseModel

import lakehouse.config
from lakehouse.cli import app
from lakehouse.cli._shared import setting_help
from lakehouse.join.options import JoinOptions

#: Flags that are the command's own, not a setting's.
COMMAND_FLAGS = {"config", "take_over", "wait_for_build"}


def _models() -> list[type[BaseModel]]:
    found = [
        m
        for m in vars(lakehouse.config).values()
        if isinstance(m, type) and issubclass(m, BaseModel)
    ]
    return [*found, JoinOptions]


def _bare(annotation: object) -> object:
    """The type without ``| None``; a tuple of strings as the list a flag repeats into."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _bare(rest[0]) if len(rest) == 1 else annotation
    if annotation == tuple[str, ...]:
        return list[str]
    return annotation


def _settings_by_help() -> dict[str, set[object]]:
    found: dict[str, set[object]] = {}
    for model in _models():
        for name, field in model.model_fields.items():
            text = setting_help(model, name)
            if text:
                found.setdefault(text, set()).add(_bare(field.annotation))
    return found


@pytest.mark.parametrize("command", ["ingest", "join"])
def test_each_flag_has_its_settings_help_and_type(command):
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    hints = typing.get_type_hints(click_command.callback, include_extras=True)
    by_help = _settings_by_help()
    checked = 0
    for param in click_command.params:
        if param.name in COMMAND_FLAGS:
            continue
        assert param.help in by_help, f"--{param.name}: its help is not a setting's"
        flag_type = _bare(typing.get_args(hints[param.name])[0])
        assert by_help[param.help] == {flag_type}, f"--{param.name}: {flag_type}"
        checked += 1
    assert checked >= 15
