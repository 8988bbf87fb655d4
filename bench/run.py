"""Run the benchmarks side by side and write the report (``make bench``).

Usage::

    python -m bench.run                      # --sizes small: a few minutes
    python -m bench.run --sizes full         # up to 10M probe rows x 1M keys x 10 versions
    python -m bench.run --sizes smoke        # seconds per engine: checks the harness
    python -m bench.run --only asof --engines kernel,duckdb
    python -m bench.run --sizes full --only asof --workloads "5M x 1M x 5"

What it does, in order (each engine and scenario in its own subprocess, see
:mod:`bench.measure`):

1. **asof** (:mod:`bench.asof_engines`): for each workload size, generate the seeded parquet
   inputs once (:mod:`bench.workload`), then run every engine on them: the sample check,
   a warm-up, ``--runs`` timed runs. Results are checked against DuckDB's.
2. **proctime** (:mod:`bench.proctime`): build tables and raw micro-batches, then the
   project's processing-time operator and Spark's stream-static join on them.
3. **e2e** (:mod:`bench.e2e`): CDC ingestion from files and from the test broker, latency at
   several trigger intervals, cost against history length, cost against pending backlog.

The report goes to ``--out`` (default ``bench/out/``, ignored by git): ``report.json``,
``report.md``, ``asof.png``, ``growth.png``, and ``logs/`` with each child's stderr. The
report is rewritten after every section, so an interrupted run leaves what it measured.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import report
from bench.asof_engines import ENGINES, SAMPLED
from bench.measure import REPO, run_isolated
from bench.workload import Workload, generate


@dataclass(frozen=True, slots=True)
class Preset:
    """Sizes of one ``--sizes`` choice."""

    asof: tuple[Workload, ...]
    runs: int
    spark_memory: str
    #: (keys, versions) of each processing-time comparison
    proctime: tuple[tuple[int, int], ...]
    proctime_batch_rows: int
    proctime_batches: int
    #: (snapshot keys, updates) of the ingestion runs, files then broker
    ingest_files: tuple[int, int]
    ingest_broker: tuple[int, int]
    latency_intervals_s: tuple[float, ...]
    latency_rows_per_s: int
    latency_warmup_s: float
    latency_seconds: float
    history_keys: int
    history_probe_rows: int
    history_versions: tuple[int, ...] = (1, 10, 100)
    backlog: dict[str, int] = field(default_factory=dict)
    timeout_s: float = 1800


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        asof=(Workload(20_000, 2_000, 10),),
        runs=2,
        spark_memory="2g",
        proctime=((20_000, 1), (20_000, 10)),
        proctime_batch_rows=20_000,
        proctime_batches=3,
        ingest_files=(500, 1_500),
        ingest_broker=(500, 1_500),
        latency_intervals_s=(1.0,),
        latency_rows_per_s=100,
        latency_warmup_s=10,
        latency_seconds=10,
        history_keys=1_000,
        history_probe_rows=5_000,
        backlog={"keys": 1_000, "versions": 2, "batch_rows": 5_000, "batches": 3},
        timeout_s=600,
    ),
    "small": Preset(
        asof=(Workload(100_000, 10_000, 10), Workload(1_000_000, 100_000, 10)),
        runs=3,
        spark_memory="4g",
        proctime=((100_000, 1), (100_000, 10)),
        proctime_batch_rows=200_000,
        proctime_batches=4,
        ingest_files=(2_000, 18_000),
        ingest_broker=(20_000, 180_000),
        latency_intervals_s=(1.0, 5.0),
        latency_rows_per_s=200,
        latency_warmup_s=20,
        latency_seconds=30,
        history_keys=10_000,
        history_probe_rows=50_000,
        backlog={"keys": 10_000, "versions": 2, "batch_rows": 50_000, "batches": 5},
    ),
    "full": Preset(
        asof=(
            Workload(100_000, 10_000, 10),
            Workload(1_000_000, 100_000, 10),
            Workload(5_000_000, 1_000_000, 5),
            Workload(10_000_000, 1_000_000, 10),
        ),
        runs=3,
        spark_memory="8g",
        proctime=((1_000_000, 1), (1_000_000, 10)),
        proctime_batch_rows=1_000_000,
        proctime_batches=4,
        ingest_files=(10_000, 90_000),
        ingest_broker=(20_000, 180_000),
        latency_intervals_s=(1.0, 2.0, 5.0, 10.0),
        latency_rows_per_s=500,
        latency_warmup_s=20,
        latency_seconds=60,
        history_keys=100_000,
        history_probe_rows=200_000,
        backlog={"keys": 100_000, "versions": 2, "batch_rows": 200_000, "batches": 8},
        timeout_s=3600,
    ),
}


class Runner:
    """Runs the sections and keeps the results (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.preset = PRESETS[args.sizes]
        self.out = Path(args.out)
        # absolute: engines and plan checks compare the paths Spark reports (file:///...)
        self.data = (Path(args.data) if args.data else self.out / "data").resolve()
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.runs = args.runs or self.preset.runs
        self.spark_conf = {"spark.driver.memory": self.preset.spark_memory}
        self.started = time.monotonic()
        self.results: dict[str, Any] = {
            "command": "python -m bench.run " + shlex.join(sys.argv[1:]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": report.machine(),
            "preset": args.sizes,
            "runs": self.runs,
            "asof": [],
            "proctime": [],
            "e2e": {},
            "notes": [],
        }

    def say(self, text: str) -> None:
        """Progress on stderr (the report is the output)."""
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed / 60:5.1f} min] {text}", file=sys.stderr, flush=True)

    def save(self) -> Path:
        """Rewrite the report with what has been measured so far."""
        self.results["seconds"] = time.monotonic() - self.started
        self.results["load_average_end"] = os.getloadavg()
        return report.write(self.results, self.out)

    def isolated(self, module: str, spec: dict[str, Any], log: str) -> Any:
        """Run one child; its stderr goes to ``logs/<log>.log``."""
        return run_isolated(
            module, spec, timeout_s=self.preset.timeout_s, log=self.logs / f"{log}.log"
        )

    # ------------------------------------------------------------------------------ asof

    def asof(self) -> None:
        """Section 1 (see the module docstring)."""
        engines = self.args.engines.split(",") if self.args.engines else list(ENGINES)
        if "duckdb" not in engines:
            engines.insert(0, "duckdb")  # the reference for correctness and ratios
        engines = ["duckdb", *[e for e in engines if e != "duckdb"]]
        for w in _chosen(self.preset.asof, self.args.workloads):
            self.say(f"asof {w.name}: generating inputs")
            files = generate(w, self.data)
            rng = np.random.default_rng([w.seed, 9])
            sample = sorted(rng.choice(w.probe_rows, min(1000, w.probe_rows), replace=False))
            entry: dict[str, Any] = {"name": w.name, "workload": asdict(w), "engines": {}}
            self.results["asof"].append(entry)
            reference: dict[str, Any] | None = None
            for engine in engines:
                self.say(f"asof {w.name}: {engine}")
                spec = {
                    "engine": engine,
                    "build": files.build,
                    "probe": files.probe,
                    "runs": self.runs,
                    "warmup": 1,
                    "sample_ids": [int(i) for i in sample] if engine in SAMPLED else None,
                    "spark_conf": self.spark_conf,
                }
                r = self.isolated("bench.asof_engines", spec, f"asof-{w.slug}-{engine}")
                record: dict[str, Any] = {
                    "ok": r.ok,
                    "peak_rss_bytes": r.peak_rss_bytes,
                    "seconds": r.seconds,
                    "error": r.error,
                    **({k: r.result[k] for k in ("runs", "result")} if r.ok else {}),
                }
                if r.ok and engine == "duckdb":
                    reference = r.result
                    record["correct"] = True
                elif r.ok and engine == "spark-floor":
                    record["correct"] = r.result["result"][0] == w.probe_rows  # not a join
                elif r.ok and reference is not None:
                    record["correct"] = _same(r.result, reference)
                    if not record["correct"]:
                        record["error"] = (
                            f"result {r.result['result']} differs from DuckDB's "
                            f"{reference['result']}"
                        )
                entry["engines"][engine] = record
                if r.ok:
                    rps = w.probe_rows / r.result["runs"]["min_s"]
                    self.say(
                        f"  {engine}: {r.result['runs']['min_s']:.2f} s min, "
                        f"{rps / 1e6:.2f}M rows/s, correct={record.get('correct')}"
                    )
                else:
                    self.say(f"  {engine}: FAILED ({r.error.splitlines()[-1:]})")
            self.save()

    # -------------------------------------------------------------------------- proctime

    def proctime(self) -> None:
        """Section 2 (see the module docstring)."""
        p = self.preset
        for keys, versions in p.proctime:
            w = Workload(0, keys, versions)
            name = f"{_short(p.proctime_batch_rows)} rows/batch x {_short(keys)} keys x {versions}"
            base = self.out / "work" / f"proctime-k{keys}-v{versions}"
            build = str(base / "build")
            static = build if versions == 1 else str(base / "static")
            self.say(f"proctime {name}: setting up tables")
            setup = self.isolated(
                "bench.tables",
                {
                    "workload": asdict(w),
                    "build_table": build,
                    "static_uri": static,
                    "batches_dir": str(base / f"batches-{p.proctime_batch_rows}"),
                    "batches": p.proctime_batches,
                    "batch_rows": p.proctime_batch_rows,
                    "spark_conf": self.spark_conf,
                },
                f"proctime-setup-k{keys}-v{versions}",
            )
            if not setup.ok:
                self.results["notes"].append(f"proctime {name}: setup failed: {setup.error}")
                continue
            for variant in ("micro-batch", "join"):
                entry: dict[str, Any] = {"name": name, "variant": variant, "sides": {}}
                for side in ("product", "peer"):
                    self.say(f"proctime {name} {variant}: {side}")
                    r = self.isolated(
                        "bench.proctime",
                        {
                            "side": side,
                            "variant": variant,
                            "root": str(base / f"run-{variant}-{side}"),
                            "build_table": build,
                            "static_uri": static,
                            "batches": setup.result["batches"],
                            "spark_conf": self.spark_conf,
                        },
                        f"proctime-k{keys}-v{versions}-{variant}-{side}",
                    )
                    entry["sides"][side] = (
                        {**r.result, "peak_rss_bytes": r.peak_rss_bytes}
                        if r.ok
                        else {"error": r.error}
                    )
                    if not r.ok:
                        self.say(f"  FAILED: {r.error.splitlines()[-1:]}")
                sides = entry["sides"]
                if all("result" in sides.get(s, {}) for s in ("product", "peer")):
                    entry["correct"] = sides["product"]["result"] == sides["peer"]["result"]
                fig = report.proctime_figures(entry)
                self.say(f"  ratio {fig['ratio']}, correct={entry.get('correct')}")
                self.results["proctime"].append(entry)
                self.save()

    # ------------------------------------------------------------------------------- e2e

    def e2e(self) -> None:
        """Section 3 (see the module docstring)."""
        p = self.preset
        work = self.out / "work"
        e2e = self.results["e2e"]
        for source, (keys, updates) in (
            ("files", p.ingest_files),
            ("broker", p.ingest_broker),
        ):
            # from the broker, the product's ingest and a plain Kafka-to-Delta copy of the
            # same records, side by side
            for sink in ("product", "copy") if source == "broker" else ("product",):
                name = f"ingest_{source}" + ("" if sink == "product" else f"_{sink}")
                self.say(f"e2e ingest from {source} ({sink}): {keys + updates} events")
                r = self.isolated(
                    "bench.e2e",
                    {
                        "scenario": "ingest",
                        "source": source,
                        "sink": sink,
                        "keys": keys,
                        "updates": updates,
                        "root": str(work / f"ingest-{source}-{sink}"),
                        "spark_conf": self.spark_conf,
                    },
                    f"e2e-{name}",
                )
                e2e[name] = r.result if r.ok else {"source": source, "error": r.error or "failed"}
                self.save()
        self.say("e2e Spark jobs and log reads per micro-batch")
        r = self.isolated(
            "bench.e2e",
            {"scenario": "cost", "root": str(work / "cost"), "spark_conf": self.spark_conf},
            "e2e-cost",
        )
        e2e["cost"] = r.result if r.ok else {"error": r.error or "failed"}
        self.save()
        e2e["latency"] = []
        for interval in p.latency_intervals_s:
            self.say(f"e2e latency at a {interval} s trigger")
            r = self.isolated(
                "bench.e2e",
                {
                    "scenario": "latency",
                    "keys": 10_000,
                    "rows_per_s": p.latency_rows_per_s,
                    "interval_s": interval,
                    "warmup_s": p.latency_warmup_s,
                    "seconds": p.latency_seconds,
                    "root": str(work / f"latency-{interval}"),
                    "spark_conf": self.spark_conf,
                },
                f"e2e-latency-{interval}",
            )
            e2e["latency"].append(
                r.result if r.ok else {"interval_s": interval, "error": r.error or "failed"}
            )
            self.save()
        self.say("e2e cost against history length")
        r = self.isolated(
            "bench.e2e",
            {
                "scenario": "history",
                "keys": p.history_keys,
                "probe_rows": p.history_probe_rows,
                "versions": list(p.history_versions),
                "runs": self.runs,
                "root": str(work / "history"),
                "spark_conf": self.spark_conf,
            },
            "e2e-history",
        )
        e2e["history"] = r.result if r.ok else {"error": r.error}
        self.save()
        self.say("e2e cost against pending backlog")
        r = self.isolated(
            "bench.e2e",
            {
                "scenario": "backlog",
                **p.backlog,
                "root": str(work / "backlog"),
                "spark_conf": self.spark_conf,
            },
            "e2e-backlog",
        )
        e2e["backlog"] = r.result if r.ok else {"error": r.error}
        self.save()


def _chosen(workloads: tuple[Workload, ...], names: str | None) -> list[Workload]:
    """The preset's as-of workloads named in ``--workloads`` (all when None)."""
    if not names:
        return list(workloads)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {w.name: w for w in workloads} | {w.slug: w for w in workloads}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        choices = ", ".join(repr(w.name) for w in workloads)
        raise SystemExit(f"--workloads: unknown {unknown}; this preset has {choices}")
    return [known[n] for n in wanted]


def _same(result: dict[str, Any], reference: dict[str, Any]) -> bool:
    """Same (matched, sum) as the reference and, where both joined the sample, same rows."""
    if list(result["result"]) != list(reference["result"]):
        return False
    mine, theirs = result.get("sample"), reference.get("sample")
    return mine is None or theirs is None or mine == theirs


def _short(n: int) -> str:
    return Workload(n, 1, 1).name.split(" x ")[0]


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the sections, write the report; 0 unless a result is wrong."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sizes", choices=sorted(PRESETS), default="small")
    parser.add_argument(
        "--only",
        default="asof,proctime,e2e",
        help="comma-separated sections: asof, proctime, e2e (default: all)",
    )
    parser.add_argument("--engines", default=None, help=f"asof engines: {','.join(ENGINES)}")
    parser.add_argument(
        "--workloads",
        default=None,
        help="asof: only these workloads of the preset, comma-separated names such as "
        "'5M x 1M x 5' (or slugs such as p5000000_k1000000_v5_s6)",
    )
    parser.add_argument("--runs", type=int, default=None, help="timed runs after the warm-up")
    parser.add_argument("--out", default=str(REPO / "bench" / "out"))
    parser.add_argument("--data", default=None, help="where generated inputs are kept")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the sections of the report already in --out that this run does not repeat",
    )
    args = parser.parse_args(argv)
    runner = Runner(args)
    previous = Path(args.out) / "report.json"
    if args.keep and previous.exists():
        import json

        old = json.loads(previous.read_text())
        for section in ("asof", "proctime", "e2e"):
            if section not in args.only:
                runner.results[section] = old.get(section) or runner.results[section]
        runner.results["notes"].append(
            f"sections not in --only kept from the run started {old.get('started')} "
            f"({old.get('command')})"
        )
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    for section in sections:
        if section not in ("asof", "proctime", "e2e"):
            parser.error(f"unknown section {section!r}")
        getattr(runner, section)()
    path = runner.save()
    runner.say(f"report: {path}")
    wrong = [
        name
        for entry in runner.results["asof"]
        for name, r in entry["engines"].items()
        if r.get("correct") is False and name.startswith(("kernel", "spark-project"))
    ] + [e["name"] for e in runner.results["proctime"] if e.get("correct") is False]
    if wrong:
        runner.say(f"WRONG RESULTS: {wrong}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
