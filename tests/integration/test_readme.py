"""The README's worked example (the docs site's tutorial), run word for word as a new user runs
it: each ``bash`` block in an empty directory through ``bash -e`` with the installed
``lakehouse`` (and ``python``) on the ``PATH``; a ``python`` block is the file its first line
names (``# enrich.py``), written there for a later ``bash`` block to run. A command the README
annotates ``# exit N`` must exit N, every other one 0; a ``text`` block after a ``bash`` block is
the end of what that block prints, as an 80-column terminal shows it. A change that alters the
example's output fails here until the README says what users now see.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_EXIT = re.compile(r"^(?P<command>.*?\S)\s+# exit (?P<code>\d+)\b.*$")


def _tutorial() -> str:
    text = README.read_text()
    start = text.index("<!-- --8<-- [start:tutorial] -->")
    end = text.index("<!-- --8<-- [end:tutorial] -->")
    return text[start:end]


def _blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks, in order: (language, body)."""
    return re.findall(r"^```(\w+)\n(.*?)^```$", text, flags=re.M | re.S)


def _script(block: str) -> str:
    """A ``bash`` block as a script that checks each annotated exit code."""
    lines = []
    for line in block.splitlines():
        found = _EXIT.match(line)
        if found is None:
            lines.append(line)
            continue
        command, code = found["command"], found["code"]
        said = f"printf 'README: %s exited %s; the README says {code}\\n' {shlex.quote(command)}"
        lines.append(
            f'rc=0; {command} || rc=$?; [ "$rc" -eq {code} ] || {{ {said} "$rc" >&2; exit 99; }}'
        )
    return "\n".join(lines) + "\n"


def _shown(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def test_the_readme_example_is_what_it_says(tmp_path):
    """The README's example has the blocks and the exit codes the run below checks."""
    blocks = _blocks(_tutorial())
    kinds = [kind for kind, _ in blocks]
    assert kinds == [
        *("bash", "bash", "bash", "text", "bash", "text"),
        *("python", "bash", "text"),
    ], kinds
    lines = [line for _, body in blocks for line in body.splitlines()]
    annotated = [m["code"] for line in lines if (m := _EXIT.match(line))]
    assert annotated == ["3", "0", "1"]


@pytest.mark.slow
def test_the_readme_tutorial_runs_word_for_word(tmp_path):
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "80",
    }
    env.pop("LAKEHOUSE_CONFIG", None)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False
        )

    blocks = _blocks(_tutorial())
    stderr = []
    stdout: dict[int, str] = {}
    for i, (kind, body) in enumerate(blocks):
        if kind == "python":
            name = body.splitlines()[0].removeprefix("# ").strip()
            (tmp_path / name).write_text(body)
        if kind != "bash":
            continue
        done = run(["bash", "-e", "-c", _script(body)])
        assert done.returncode == 0, f"block {i}:\n{body}\n{done.stderr[-4000:]}"
        stderr.append(done.stderr)
        stdout[i] = done.stdout
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text":
            assert _shown(done.stdout).endswith(_shown(blocks[i + 1][1])), done.stdout
    # what the prose quotes from the runs
    printed = " ".join(" ".join(stderr).split())
    assert "join orders-rowtime incomplete: 2 row(s) left pending" in printed
    assert "+5 versions" in printed and "marker set now by last" in printed
    quality = next(i for i, (_, body) in enumerate(blocks) if "lakehouse quality" in body)
    assert "1 of 5 output rows did not match" in " ".join(stdout[quality].split())

    # the user's next change-log file holds a line that is not JSON: the ingest creates its
    # dead-letter table (a path relative to the working directory) and goes on
    (tmp_path / "cdc" / "0002.jsonl").write_text("{not json\n")
    more = run(["lakehouse", "ingest", "-c", "lakehouse.toml"])
    assert more.returncode == 0, more.stderr[-4000:]
    assert "1 dead-lettered (malformed_json 1)" in " ".join(more.stderr.split()), more.stderr
    assert (tmp_path / "tables" / "prices_dead_letter" / "_delta_log").is_dir()
