"""The benchmark report: JSON (everything measured), markdown (tables, targets) and plots.

Throughput figures are probe rows per second computed from the *fastest* run (``min``) and
from the median run; ratios compare the project with a peer on the same data and the same
cores, fastest against fastest. Peak memory is the largest resident size of the engine's
whole process tree (for Spark: driver, JVM and Python workers, shared pages counted per
process, so an upper bound).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

#: The issue's targets.
KERNEL_TARGET = 1 / 3  # of DuckDB's ASOF JOIN throughput
PROCTIME_TARGET = 0.9  # of Spark's stream-static join throughput

_PACKAGES = ("pyspark", "deltalake", "duckdb", "polars", "pandas", "pyarrow", "numpy")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": (java.stderr or java.stdout).splitlines()[0] if java.returncode == 0 else None,
        "packages": versions,
        "load_average_start": os.getloadavg(),
    }


# ------------------------------------------------------------------------------- numbers


def rate(rows: int, seconds: float | None) -> float | None:
    """Rows per second, None when not measured."""
    return None if not seconds else rows / seconds


def _fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.0f}"


def _fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _verdict(value: float | None, target: float) -> str:
    if value is None:
        return "not measured"
    return "PASS" if value >= target else "FAIL"


# ----------------------------------------------------------------------------- sections


def asof_rows(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-engine figures of one as-of workload (``entry`` as the runner stores it)."""
    probe_rows = entry["workload"]["probe_rows"]
    out = []
    for name, r in entry["engines"].items():
        runs = r.get("runs") or {}
        out.append(
            {
                "engine": name,
                "ok": r.get("ok", False),
                "correct": r.get("correct"),
                "min_s": runs.get("min_s"),
                "median_s": runs.get("median_s"),
                "rows_per_s": rate(probe_rows, runs.get("min_s")),
                "rows_per_s_median": rate(probe_rows, runs.get("median_s")),
                "cpu_s": statistics.median(runs["cpu_s"]) if runs.get("cpu_s") else None,
                "peak_rss_mib": (r.get("peak_rss_bytes") or 0) / 2**20 or None,
                "error": r.get("error", ""),
            }
        )
    return out


def asof_ratio(entry: Mapping[str, Any], engine: str, peer: str) -> float | None:
    """Throughput of ``engine`` over ``peer`` (fastest runs), None unless both are correct."""
    rows = {r["engine"]: r for r in asof_rows(entry)}
    a, b = rows.get(engine), rows.get(peer)
    if not a or not b or not a["correct"] or not b["correct"] or not a["min_s"]:
        return None
    return b["min_s"] / a["min_s"]


def proctime_figures(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Throughput of both sides of one processing-time comparison (warm-up batch excluded)."""
    figures: dict[str, Any] = {}
    for side in ("product", "peer"):
        r = entry["sides"].get(side) or {}
        walls = (r.get("wall_s") or [])[1:]
        rows = (r.get("rows") or [])[1:]
        if not walls:
            figures[side] = None
            continue
        per = [n / s for n, s in zip(rows, walls, strict=True)]
        figures[side] = {
            "rows_per_s": max(per),
            "rows_per_s_median": statistics.median(per),
            "cold_s": r["wall_s"][0],
            "min_s": min(walls),
            "median_s": statistics.median(walls),
            "peak_rss_mib": (r.get("peak_rss_bytes") or 0) / 2**20 or None,
        }
    prod, peer = figures.get("product"), figures.get("peer")
    figures["ratio"] = prod["rows_per_s"] / peer["rows_per_s"] if prod and peer else None
    figures["ratio_median"] = (
        prod["rows_per_s_median"] / peer["rows_per_s_median"] if prod and peer else None
    )
    figures["correct"] = entry.get("correct")
    return figures


def history_growth(points: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    """Cost per probe row against the build size: the ratio between the longest and the
    shortest history, the ratio pure logarithmic growth would give, and the exponent of a
    power-law fit (1 = linear in the history, 0 = flat)."""
    pts = [(p["build_rows"], min(p[key]) / p["probe_rows"]) for p in points if p.get(key)]
    if len(pts) < 2:
        return None
    (b0, c0), (b1, c1) = pts[0], pts[-1]
    xs = [math.log(b) for b, _ in pts]
    ys = [math.log(c) for _, c in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    log_bound = math.log(b1) / math.log(max(b0, 2))
    return {
        "cost_per_row_s": [c for _, c in pts],
        "build_rows": [b for b, _ in pts],
        "growth": c1 / c0,
        "log_bound": log_bound,
        "exponent": slope,
        "pass": c1 / c0 <= log_bound,
    }


def backlog_fit(points: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Marginal seconds per pending row (least squares over the batches after the first)
    against the cost per released row of the first steady batch."""
    pts = [p for p in points if p["batch"] >= 1]
    if len(pts) < 2:
        return None
    xs = [p["pending_after"] - p["arrived"] + p["released"] for p in pts]  # pending before
    ys = [p["seconds"] for p in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    per_released = pts[0]["seconds"] / max(pts[0]["released"], 1)
    return {
        "seconds_per_pending_row": slope,
        "seconds_per_released_row": per_released,
        "ratio": slope / per_released if per_released else None,
        "pass": slope <= per_released / 10,
    }


# ------------------------------------------------------------------------------ targets


def targets(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue with the measured value, the peer's, the ratio and a verdict."""
    out: list[dict[str, Any]] = []
    asof = results.get("asof") or []
    if asof:
        largest = max(asof, key=lambda e: e["workload"]["probe_rows"] * e["workload"]["keys"])
        rows = {r["engine"]: r for r in asof_rows(largest)}
        duck = rows.get("duckdb", {}).get("rows_per_s")
        for engine, label in (
            ("spark-project", "row-time join, product path (Spark, join_as_of)"),
            ("kernel", "row-time kernel, in-process (asof_match)"),
        ):
            ratio = asof_ratio(largest, engine, "duckdb")
            out.append(
                {
                    "target": f"{label} >= 1/3 of DuckDB ASOF JOIN",
                    "workload": largest["name"],
                    "measured": rows.get(engine, {}).get("rows_per_s"),
                    "peer": duck,
                    "unit": "probe rows/s",
                    "ratio": ratio,
                    "verdict": _verdict(ratio, KERNEL_TARGET),
                }
            )
    for entry in results.get("proctime") or []:
        fig = proctime_figures(entry)
        prod, peer = fig.get("product"), fig.get("peer")
        out.append(
            {
                "target": f"processing-time join ({entry['variant']}) >= 0.9x stream-static",
                "workload": entry["name"],
                "measured": prod["rows_per_s"] if prod else None,
                "peer": peer["rows_per_s"] if peer else None,
                "unit": "probe rows/s",
                "ratio": fig["ratio"],
                "verdict": _verdict(fig["ratio"], PROCTIME_TARGET)
                if fig.get("correct") is not False
                else "WRONG RESULT",
            }
        )
    e2e = results.get("e2e") or {}
    hist = e2e.get("history")
    if hist and hist.get("points"):
        for key, label in (
            ("kernel_s", "kernel"),
            ("spark_s", "Spark path"),
            ("operator_s", "operator batch"),
        ):
            g = history_growth(hist["points"], key)
            if g is None:
                continue
            out.append(
                {
                    "target": f"cost per probe row grows at most logarithmically ({label})",
                    "workload": f"{hist['probe_rows']} probe rows, {hist['keys']} keys, "
                    f"{'/'.join(str(p['versions']) for p in hist['points'])} versions",
                    "measured": g["growth"],
                    "peer": g["log_bound"],
                    "unit": "cost growth 1 -> max versions (peer: log bound)",
                    "ratio": g["exponent"],
                    "verdict": "PASS" if g["pass"] else "FAIL",
                }
            )
    back = e2e.get("backlog")
    if back and back.get("points"):
        fit = backlog_fit(back["points"])
        if fit is not None:
            out.append(
                {
                    "target": "pending backlog does not re-join the history "
                    "(marginal cost per waiting row <= 1/10 of a joined row's)",
                    "workload": f"{back['batch_rows']} rows/batch, {back['keys']} keys x "
                    f"{back['versions']}",
                    "measured": fit["seconds_per_pending_row"],
                    "peer": fit["seconds_per_released_row"],
                    "unit": "s per pending row (peer: s per released row)",
                    "ratio": fit["ratio"],
                    "verdict": "PASS" if fit["pass"] else "FAIL",
                }
            )
    return out


# ------------------------------------------------------------------------------ writing


def write(results: Mapping[str, Any], out_dir: Path) -> Path:
    """Write ``report.json``, ``report.md`` and the plots to ``out_dir``; return the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    full = dict(results)
    full["targets"] = targets(results)
    (out_dir / "report.json").write_text(json.dumps(full, indent=2, default=str))
    plots = _plots(results, out_dir)
    md = out_dir / "report.md"
    md.write_text(markdown(full, plots))
    return md


def markdown(results: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    """The report as markdown (also the source of the figures in ``bench/README.md``)."""
    m = results["machine"]
    lines = [
        "# Temporal join benchmark",
        "",
        f"Command: `{results['command']}`  ",
        f"Started {results['started']}, took {results.get('seconds', 0) / 60:.1f} min.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; "
        f"Python {m['python']}; {m['java']}; "
        + ", ".join(f"{k} {v}" for k, v in m["packages"].items())
        + ".  ",
        f"Load average at start {tuple(round(x, 1) for x in m['load_average_start'])}, at end "
        f"{tuple(round(x, 1) for x in results.get('load_average_end', (0, 0, 0)))} "
        "(the machine was shared; CPU seconds are less sensitive to that than wall time).",
        "",
        "## Targets",
        "",
        "| target | workload | project | peer | unit | ratio | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in results["targets"]:
        measured = t["measured"]
        peer = t["peer"]
        if "rows/s" in t["unit"]:
            mtxt, ptxt = _fmt_rate(measured), _fmt_rate(peer)
        else:
            mtxt = "—" if measured is None else f"{measured:.3g}"
            ptxt = "—" if peer is None else f"{peer:.3g}"
        ratio = t["ratio"]
        rtxt = "—" if ratio is None else f"{ratio:.3g}"
        lines.append(
            f"| {t['target']} | {t['workload']} | {mtxt} | {ptxt} | {t['unit']} | {rtxt} | "
            f"**{t['verdict']}** |"
        )
    lines += [
        "",
        "Ratios: project over peer throughput, fastest run against fastest run; for the "
        "history target the ratio column is the fitted exponent of cost against history "
        "length (1 = linear, 0 = flat); for the backlog target it is the marginal cost of a "
        "waiting row over the cost of a joined row.",
        "",
    ]
    for name in plots:
        lines += [f"![{name}]({name})", ""]
    asof = results.get("asof") or []
    if asof:
        lines += [
            "## 1. Row-time as-of join (probe rows joined per second)",
            "",
            "Same parquet files for every engine; the time covers reading them, the LEFT as-of "
            "join, and counting matches and summing the joined value. `kernel` is the "
            "project's numpy kernel in one process; `spark-project` the product path "
            "(`join_as_of`, Spark local[2]; the narrow path: an Arrow UDF probing an index "
            "each Python worker builds from the build files and keeps); "
            "`spark-project-shuffle` the same call on its shuffle (cogroup) fallback.",
            "",
        ]
        for entry in asof:
            lines += [
                f"### {entry['name']} (probe rows x keys x versions per key)",
                "",
                "| engine | correct | min s | median s | rows/s (min) | rows/s (median) | "
                "vs DuckDB | CPU s | peak RSS MiB |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for r in asof_rows(entry):
                ratio = asof_ratio(entry, r["engine"], "duckdb")
                correct = {True: "yes", False: "**NO**", None: "—"}[r["correct"]]
                if not r["ok"]:
                    correct = "failed: " + (r["error"].splitlines() or [""])[-1][:60]
                rss = "—" if r["peak_rss_mib"] is None else f"{r['peak_rss_mib']:.0f}"
                lines.append(
                    f"| {r['engine']} | {correct} | {_fmt_s(r['min_s'])} | "
                    f"{_fmt_s(r['median_s'])} | {_fmt_rate(r['rows_per_s'])} | "
                    f"{_fmt_rate(r['rows_per_s_median'])} | {_fmt_ratio(ratio)} | "
                    f"{_fmt_s(r['cpu_s'])} | {rss} |"
                )
            lines.append("")
    proc = results.get("proctime") or []
    if proc:
        lines += [
            "## 2. Processing-time join against Spark's stream-static join",
            "",
            "Same raw micro-batches (JSON), same build data. `micro-batch`: the whole "
            "foreachBatch function (project: `TemporalJoin.process`; peer: parse, left join "
            "with the static table, Delta append). `join`: the join alone (project: "
            "`join_as_of(latest=True)`; peer: `DataFrame.join`), counted. First batch = warm-up.",
            "",
            "| workload | variant | project rows/s | peer rows/s | ratio (best) | "
            "ratio (median) | project cold batch s | correct |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for entry in proc:
            f = proctime_figures(entry)
            prod, peer = f.get("product"), f.get("peer")
            correct = {True: "yes", False: "**NO**", None: "—"}[f.get("correct")]
            lines.append(
                f"| {entry['name']} | {entry['variant']} | "
                f"{_fmt_rate(prod and prod['rows_per_s'])} | "
                f"{_fmt_rate(peer and peer['rows_per_s'])} | {_fmt_ratio(f['ratio'])} | "
                f"{_fmt_ratio(f['ratio_median'])} | {_fmt_s(prod and prod['cold_s'])} | "
                f"{correct} |"
            )
        lines.append("")
    e2e = results.get("e2e") or {}
    if e2e:
        lines += ["## 3. End to end", ""]
    ingest = [e2e[k] for k in ("ingest_files", "ingest_broker") if e2e.get(k)]
    if ingest:
        lines += [
            "### CDC ingestion (Debezium JSON with schemas into the build table)",
            "",
            "| source | events | batches | seconds | events/s | steady events/s |",
            "|---|---|---|---|---|---|",
        ]
        for r in ingest:
            if not r.get("events"):
                lines.append(f"| {r.get('source', '?')} | failed: {r.get('error', '')[:80]} |")
                continue
            lines.append(
                f"| {r['source']} | {r['events']} | {r['batches']} | {r['seconds']:.1f} | "
                f"{_fmt_rate(r['events_per_s'])} | {_fmt_rate(r.get('steady_events_per_s'))} |"
            )
        lines.append("")
    lat = e2e.get("latency") or []
    if lat:
        lines += [
            "### Join latency, arrival to commit (processing time, files source)",
            "",
            "| trigger interval s | rows/s fed | rows measured | p50 s | p95 s | max s |",
            "|---|---|---|---|---|---|",
        ]
        for r in lat:
            if r.get("p50_s") is None:
                lines.append(f"| {r.get('interval_s')} | failed: {r.get('error', '')[:80]} |")
                continue
            lines.append(
                f"| {r['interval_s']} | {r['rows_per_s']} | {r['measured']} | "
                f"{r['p50_s']:.2f} | {r['p95_s']:.2f} | {r['max_s']:.2f} |"
            )
        lines.append("")
    hist = e2e.get("history")
    if hist and hist.get("points"):
        lines += [
            f"### Cost per probe row as the history grows ({hist['probe_rows']} probe rows, "
            f"{hist['keys']} keys)",
            "",
            "| versions per key | build rows | kernel µs/row (index built once) | "
            "kernel index build s | Spark path µs/row | operator µs/row |",
            "|---|---|---|---|---|---|",
        ]
        for p in hist["points"]:
            n = p["probe_rows"]
            lines.append(
                f"| {p['versions']} | {p['build_rows']} | {min(p['kernel_s']) / n * 1e6:.3f} | "
                f"{p.get('kernel_index_s', float('nan')):.3f} | "
                f"{min(p['spark_s']) / n * 1e6:.2f} | {min(p['operator_s']) / n * 1e6:.2f} |"
            )
        lines.append("")
    back = e2e.get("backlog")
    if back and back.get("points"):
        lines += [
            f"### Pending backlog ({back['batch_rows']} rows per batch, half released)",
            "",
            "| batch | pending before | released | seconds | CPU s |",
            "|---|---|---|---|---|",
        ]
        for p in back["points"]:
            before = p["pending_after"] - p["arrived"] + p["released"]
            lines.append(
                f"| {p['batch']} | {before} | {p['released']} | {p['seconds']:.2f} | "
                f"{p['cpu_s']:.1f} |"
            )
        lines.append("")
    notes = results.get("notes") or []
    if notes:
        lines += ["## Notes", "", *[f"* {n}" for n in notes], ""]
    return "\n".join(lines)


def _plots(results: Mapping[str, Any], out_dir: Path) -> list[str]:
    """``asof.png`` (throughput per engine and size) and ``growth.png`` (history, backlog)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    asof = results.get("asof") or []
    if asof:
        engines = sorted({e for entry in asof for e in entry["engines"]})
        fig, ax = plt.subplots(figsize=(11, 5))
        width = 0.8 / max(len(engines), 1)
        for j, engine in enumerate(engines):
            xs, ys = [], []
            for i, entry in enumerate(asof):
                row = next((r for r in asof_rows(entry) if r["engine"] == engine), None)
                if row and row["rows_per_s"] and row["correct"] is not False:
                    xs.append(i + j * width)
                    ys.append(row["rows_per_s"])
            ax.bar(xs, ys, width, label=engine)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(asof))])
        ax.set_xticklabels([e["name"] for e in asof])
        ax.set_yscale("log")
        ax.set_ylabel("probe rows joined per second (fastest run)")
        ax.set_title("Row-time as-of join, same parquet, 2 cores")
        ax.legend(fontsize=8, ncol=3)
        fig.tight_layout()
        fig.savefig(out_dir / "asof.png", dpi=110)
        plt.close(fig)
        names.append("asof.png")
    e2e = results.get("e2e") or {}
    hist, back = e2e.get("history"), e2e.get("backlog")
    if (hist and hist.get("points")) or (back and back.get("points")):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        if hist and hist.get("points"):
            ax = axes[0]
            for key, label in (
                ("kernel_s", "kernel"),
                ("spark_s", "Spark path"),
                ("operator_s", "operator batch"),
            ):
                pts = [p for p in hist["points"] if p.get(key)]
                ax.plot(
                    [p["build_rows"] for p in pts],
                    [min(p[key]) / p["probe_rows"] * 1e6 for p in pts],
                    marker="o",
                    label=label,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("build rows (keys x versions)")
            ax.set_ylabel("µs per probe row")
            ax.set_title("Cost per probe row vs history")
            ax.legend(fontsize=8)
        if back and back.get("points"):
            ax = axes[1]
            pts = back["points"]
            ax.plot(
                [p["pending_after"] - p["arrived"] + p["released"] for p in pts],
                [p["seconds"] for p in pts],
                marker="o",
            )
            ax.set_xlabel("pending rows before the batch")
            ax.set_ylabel("batch seconds")
            ax.set_title("Batch time vs pending backlog")
        fig.tight_layout()
        fig.savefig(out_dir / "growth.png", dpi=110)
        plt.close(fig)
        names.append("growth.png")
    return names
