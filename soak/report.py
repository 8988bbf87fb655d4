"""The soak's report: memory judgement, ``report.json`` and ``report.md``.

Memory (RSS of each pipeline's whole process tree) is judged on the samples taken at least
:data:`WARMUP_S` after an incarnation started: a JVM grows its heap towards ``-Xmx`` lazily and
Spark starts Python workers as tasks need them, so the first minutes of every process grow by
design (measured: 0.5 GiB at one minute, 1.5-2 GiB at three). A role is *bounded* when

* its Python processes (the driver and Spark's Python workers, which nothing caps) do not
  grow: the median of the second half of the run is at most :data:`GROWTH_RATIO` times the
  first half's, or at most :data:`GROWTH_SLACK_BYTES` above it — over every incarnation (a
  leak that follows the data, state growing with history, grows across restarts) and within
  the longest-lived one (a leak that follows the process' age);
* its JVM stays under its ceiling: the heap (``-Xmx``, ``--driver-memory``) plus
  :data:`JVM_NON_HEAP_BYTES`. The heap itself cannot grow past ``-Xmx`` (a leak there ends
  in an OutOfMemoryError, an unexpected exit); RSS above the ceiling is off-heap growth. A
  JVM's RSS rising towards its heap size over a run is not a leak, so no ratio is applied.

Runs shorter than :data:`JUDGE_MIN_S` report the figures but do not judge them: a JVM's heap
is still settling, and each role lives only a few minutes between kills.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soak.procs import RssSample
from soak.verify import Verification

WARMUP_S = 180.0
GROWTH_RATIO = 1.25
GROWTH_SLACK_BYTES = 128 * 2**20
JUDGE_MIN_S = 600.0
#: What a JVM may hold besides its heap: metaspace, code cache, thread stacks, GC and
#: direct buffers (Arrow batches to and from Python).
JVM_NON_HEAP_BYTES = 2**30
MIB = 2**20


def _halves(
    samples: Sequence[RssSample], part: Callable[[RssSample], int]
) -> tuple[list[int], list[int]]:
    t0, t1 = samples[0].at_s, samples[-1].at_s
    mid = (t0 + t1) / 2
    first = [part(s) for s in samples if s.at_s < mid]
    second = [part(s) for s in samples if s.at_s >= mid]
    return first, second


def _bounded(first: list[int], second: list[int]) -> tuple[bool, float, float]:
    if not first or not second:
        return True, 0.0, 0.0
    m1, m2 = statistics.median(first), statistics.median(second)
    ok = m2 <= m1 * GROWTH_RATIO or m2 - m1 <= GROWTH_SLACK_BYTES
    return ok, m1, m2


def _python(s: RssSample) -> int:
    return s.driver + s.workers


def parse_memory(text: str) -> int:
    """Bytes of a JVM memory setting (``512m``, ``1g``, ``2048k``, plain bytes).

    >>> parse_memory("1g"), parse_memory("512m")
    (1073741824, 536870912)
    """
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    text = text.strip().lower()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def rss_summary(
    samples: Sequence[RssSample], *, run_s: float, jvm_heap_bytes: int
) -> dict[str, Any]:
    """Start, end and max RSS of one role and the growth judgement (module docstring).

    Args:
        samples: the role's samples, in time order.
        run_s: how long input was produced (shorter than :data:`JUDGE_MIN_S`: not judged).
        jvm_heap_bytes: the pipelines' driver heap (``-Xmx``): the JVM's ceiling is this plus
            :data:`JVM_NON_HEAP_BYTES`.
    """
    settled = [s for s in samples if s.since_start_s >= WARMUP_S]
    if not settled:
        return {"samples": len(samples), "judgement": "no samples after warm-up"}
    top = max(settled, key=lambda s: s.total)
    ok_run, m1, m2 = _bounded(*_halves(settled, _python))
    by_incarnation: dict[int, list[RssSample]] = {}
    for s in settled:
        by_incarnation.setdefault(s.incarnation, []).append(s)
    longest = max(by_incarnation.values(), key=lambda ss: ss[-1].at_s - ss[0].at_s)
    ok_inc, i1, i2 = _bounded(*_halves(longest, _python))
    jvm_max = max(s.jvm for s in settled)
    ceiling = jvm_heap_bytes + JVM_NON_HEAP_BYTES
    ok_jvm = jvm_max <= ceiling
    parts = {}
    for name in ("driver", "jvm", "workers"):
        early, late = _halves(settled, lambda s, n=name: getattr(s, n))
        if early and late:
            parts[name] = [
                round(statistics.median(early) / MIB),
                round(statistics.median(late) / MIB),
            ]
    judged = run_s >= JUDGE_MIN_S
    bounded = ok_run and ok_inc and ok_jvm
    if not judged:
        judgement = f"not judged (run shorter than {JUDGE_MIN_S / 60:.0f} min)"
    else:
        judgement = "bounded" if bounded else "GROWS"
    return {
        "samples": len(settled),
        "start_mib": round(settled[0].total / MIB),
        "end_mib": round(settled[-1].total / MIB),
        "max_mib": round(top.total / MIB),
        "max_parts_mib": {
            "driver": round(top.driver / MIB),
            "jvm": round(top.jvm / MIB),
            "workers": round(top.workers / MIB),
        },
        "python_run_medians_mib": [round(m1 / MIB), round(m2 / MIB)],
        "python_run_growth": round(m2 / m1, 3) if m1 else None,
        "python_run_bounded": ok_run,
        "longest_incarnation": longest[0].incarnation,
        "longest_incarnation_s": round(longest[-1].at_s - longest[0].at_s),
        "python_incarnation_medians_mib": [round(i1 / MIB), round(i2 / MIB)],
        "python_incarnation_growth": round(i2 / i1, 3) if i1 else None,
        "python_incarnation_bounded": ok_inc,
        "jvm_max_mib": round(jvm_max / MIB),
        "jvm_ceiling_mib": round(ceiling / MIB),
        "jvm_bounded": ok_jvm,
        "run_parts_median_mib": parts,
        "max_processes": max(s.processes for s in settled),
        "judged": judged,
        "bounded": bounded,
        "judgement": judgement,
    }


def write_rss_csv(path: Path, samples: Sequence[RssSample]) -> None:
    """Every sample, one line each (seconds, role, incarnation, bytes by part)."""
    lines = ["at_s,role,incarnation,since_start_s,driver,jvm,workers,total,processes"]
    lines += [
        f"{s.at_s:.1f},{s.role},{s.incarnation},{s.since_start_s:.1f},{s.driver},{s.jvm},"
        f"{s.workers},{s.total},{s.processes}"
        for s in samples
    ]
    path.write_text("\n".join(lines) + "\n")


def write_report(out: Path, summary: dict[str, Any], verification: Verification | None) -> bool:
    """Write ``report.json`` and ``report.md``; return whether the soak passed."""
    data = dict(summary)
    if verification is not None:
        data["checks"] = [asdict(c) for c in verification.checks]
        data["build"] = {
            "rows": verification.build_rows,
            "missing": verification.build_missing,
            "duplicated": verification.build_duplicated,
            "ingest_dead_letters": verification.ingest_dead_letters,
        }
        data["joins"] = {k: asdict(v) for k, v in verification.joins.items()}
        data["lost"] = sum(j.lost for j in verification.joins.values())
        data["duplicated"] = sum(j.duplicated for j in verification.joins.values()) + (
            verification.build_duplicated
        )
    problems = list(data.get("problems", []))
    if verification is None:
        problems.append("the tables were not verified")
    elif not verification.passed:
        problems += [f"check failed: {c.name}" for c in verification.checks if not c.passed]
    for role, rss in data.get("rss", {}).items():
        if rss.get("judgement") == "GROWS":
            problems.append(f"RSS of {role} grows (see the RSS table)")
    data["problems"] = problems
    data["passed"] = not problems
    (out / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (out / "report.md").write_text(_markdown(data))
    return bool(data["passed"])


def _markdown(d: dict[str, Any]) -> str:
    r = d["records"]
    lines = [
        "# Soak report",
        "",
        f"**{'PASSED' if d['passed'] else 'FAILED'}** — seed {d['seed']}, "
        f"{d['production_s'] / 60:.1f} min of input, {d['duration_s'] / 60:.1f} min in all, "
        f"a SIGKILL every {d['kill_every_s']} s ± 30 %, started {d['started_at']}.",
        "",
    ]
    if d["problems"]:
        lines += ["Problems:", "", *[f"* {p}" for p in d["problems"]], ""]
    lines += [
        "## Figures",
        "",
        "| figure | value |",
        "|---|---|",
        f"| CDC records produced | {r['cdc_total']} ({r['cdc_changes']} changes, "
        f"{r['cdc_tombstones']} tombstones, {r['cdc_malformed']} malformed) |",
        f"| orders produced | {r['probe_total']} ({r['probes']} valid incl. "
        f"{r['sentinels']} sentinels, {r['probes_malformed']} malformed) |",
        f"| ticks (1 s each) | {r['ticks']} ({r['ticks_late']} started more than 1 s late) |",
        f"| faults injected (SIGKILL) | {len(d['faults'])} |",
        f"| restarts | {d['restarts']} |",
        f"| unexpected exits | {len(d['unexpected_exits'])} |",
        f"| lost | {d.get('lost', '-')} |",
        f"| duplicated | {d.get('duplicated', '-')} |",
        f"| drain | {d['drain_s']:.0f} s ({'complete' if d['drained'] else 'TIMED OUT'}) |",
        f"| clean stops (exit codes) | {d['stop_codes']} |",
        "",
    ]
    if "joins" in d:
        lines += [
            "| join | output rows | pending | dead letters | lost | duplicated | wrong values "
            "| final watermark |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, j in d["joins"].items():
            lines.append(
                f"| {name} | {j['output_rows']} | {j['pending_rows']} | {j['dead_letters']} | "
                f"{j['lost']} | {j['duplicated']} | {j['value_mismatches']} | "
                f"{j['final_watermark'] or '-'} |"
            )
        b = d["build"]
        lines += [
            "",
            f"Build table: {b['rows']} rows, {b['missing']} missing, {b['duplicated']} "
            f"duplicated; ingest dead letters: {b['ingest_dead_letters']}.",
            "",
        ]
    lines += [
        "## Checks",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    for c in d.get("checks", []):
        lines.append(f"| {c['name']} | {'pass' if c['passed'] else '**FAIL**'} | {c['detail']} |")
    for c in d.get("checks", []):
        if not c["passed"] and c["samples"]:
            lines += ["", f"Examples for '{c['name']}':", "", "```", *c["samples"], "```"]
    lines += [
        "",
        "## Memory (RSS of each pipeline's process tree: driver + JVM + Python workers)",
        "",
        f"Samples at least {WARMUP_S:.0f} s after a (re)start. Bounded: the Python processes' "
        f"later median is at most {GROWTH_RATIO}x the earlier or at most "
        f"{GROWTH_SLACK_BYTES // MIB} MiB above, and the JVM stays under its heap + "
        f"{JVM_NON_HEAP_BYTES // MIB} MiB. "
        "RSS is summed per process, so pages that forked Python workers share are counted "
        "once per worker.",
        "",
        "| role | start MiB | end MiB | max MiB (driver/JVM/workers) | Python, run: 1st → 2nd "
        "half median | Python, longest incarnation | JVM max / ceiling | judgement |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for role, m in d["rss"].items():
        if "start_mib" not in m:
            lines.append(f"| {role} | - | - | - | - | - | - | {m['judgement']} |")
            continue
        p = m["max_parts_mib"]
        r1, r2 = m["python_run_medians_mib"]
        i1, i2 = m["python_incarnation_medians_mib"]
        lines.append(
            f"| {role} | {m['start_mib']} | {m['end_mib']} | {m['max_mib']} ({p['driver']}/"
            f"{p['jvm']}/{p['workers']}) | {r1} → {r2} (x{m['python_run_growth']}) | "
            f"#{m['longest_incarnation']}, {m['longest_incarnation_s']} s: {i1} → {i2} "
            f"(x{m['python_incarnation_growth']}) | {m['jvm_max_mib']} / "
            f"{m['jvm_ceiling_mib']} | {m['judgement']} |"
        )
    lines.append("")
    for role, m in d["rss"].items():
        if m.get("run_parts_median_mib"):
            text = ", ".join(
                f"{part} {a} → {b}" for part, (a, b) in m["run_parts_median_mib"].items()
            )
            lines.append(
                f"* {role}: run medians by part (MiB) {text}; up to {m['max_processes']} processes"
            )
    lines += [
        "",
        "## Faults injected",
        "",
        "A kill falls due every `--kill-every` s ± 30 % on a random pipeline, and waits until "
        "that pipeline has completed a batch since its last start.",
        "",
        "| at (s) | pipeline | waited (s) | incarnation killed | its batches | "
        "processes killed | first batch after restart (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in d["faults"]:
        recovery = f.get("recovered_after_s")
        lines.append(
            f"| {f['at_s']:.0f} | {f['role']} | {f['delayed_s']} | {f['incarnation']} | "
            f"{f['batches']} | "
            f"{f['processes']} | {'-' if recovery is None else f'{recovery:.0f}'} |"
        )
    if d["unexpected_exits"]:
        lines += ["", "## Unexpected exits", ""]
        for e in d["unexpected_exits"]:
            lines += [
                f"* {e['role']} incarnation {e['incarnation']} exited with {e['code']} at "
                f"{e['at_s']:.0f} s; log {e['log']}:",
                "",
                "```",
                e["tail"],
                "```",
            ]
    lines += [
        "",
        "## How it ran",
        "",
        f"Output: `{d['out']}` (tables, checkpoints, `logs/<pipeline>-<n>.log` per start, "
        "`rss.csv`, `broker.log`, `lakehouse.toml`).",
        "",
        "```",
        *[f"{role}: {cmd}" for role, cmd in d["commands"].items()],
        "```",
        "",
    ]
    return "\n".join(lines)
