"""A griffe extension for the Python API reference: the docstrings cross-reference in Sphinx's
roles (``:class:`~lakehouse.join.JoinOptions```), which Markdown would show as they are; each
becomes inline code of the name (the last part, for ``~``)."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    name = match[2]
    return f"`{name.rsplit('.', 1)[-1] if match[1] else name}`"


class SphinxRoles(Extension):
    """Rewrite Sphinx roles as inline code before the docstrings are parsed."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value).replace("``", "`")
