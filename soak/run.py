"""Run the soak (``make soak``): ingestion and both joins on the broker under continuous input
and repeated SIGKILLs, then verify against the reference and report.

Usage::

    python -m soak.run                                   # 20 minutes, a kill every ~180 s
    python -m soak.run --minutes 4 --kill-every 60       # a short check of the harness
    python -m soak.run --minutes 60 --seed 7 --out /tmp/soak

What it does, in order:

1. Starts an Apache Kafka broker (:mod:`lakehouse.testing.broker`) and creates the topics: the
   Debezium topic ``dbserver1.public.rates`` (3 partitions) and ``orders`` (2 partitions).
2. Writes ``<out>/lakehouse.toml`` (``[ingest]`` and the row-time ``[join]``) and starts three
   processes of the real CLI: ``lakehouse ingest``, ``lakehouse join`` (row time) and
   ``lakehouse join`` with flags for processing time.
3. For ``--minutes``, produces one tick a second from the seeded generator
   (:mod:`soak.data`); every ``--kill-every`` seconds (± 30 %) SIGKILLs a random pipeline
   (its whole process tree) and restarts it at once; restarts a pipeline that exits on its
   own too (recorded as an unexpected exit, which fails the soak); samples each pipeline's
   RSS every ``--sample-every`` seconds.
4. Sends the final records (watermark-advancing changes and sentinel orders) and waits until
   the ingest has committed every CDC offset and the joins have released everything but
   the sentinels (bounded by ``--drain-timeout``); then stops the pipelines with SIGINT.
5. Verifies the tables (:mod:`soak.verify`) and writes ``report.md``, ``report.json`` and
   ``rss.csv`` to ``--out`` (cleared first). Exit code 0 when everything passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from lakehouse.dimension.layout import META_END_OFFSETS
from soak import data
from soak.procs import Pipeline, RssSample, process_table
from soak.report import MIB, parse_memory, rss_summary, write_report, write_rss_csv

ROLES = ("ingest", "rowtime", "proctime")
STOP_TIMEOUT_S = 120.0
DRAIN_POLL_S = 3.0
#: The file that marks a directory as a soak output (the next run may clear it).
MARKER = ".soak-output"


class Producer:
    """One long-lived Kafka producer, as a Debezium connector or an order service keeps.

    Records go to the partition the generator chose, in order (idempotence on), and each
    :meth:`send` waits until every record is acknowledged, so the generator's records carry
    their offsets before the next tick.
    """

    TIMEOUT_S = 60.0

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.bootstrap = bootstrap
        self.producer = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "message.timeout.ms": int(self.TIMEOUT_S * 1000),
            }
        )

    def send(self, topic: str, records: list[data.CdcRecord] | list[data.ProbeRecord]) -> None:
        """Produce ``records`` to ``topic``; set each one's offset.

        Raises:
            SourceError: a record was not acknowledged within ``TIMEOUT_S``, or landed in
                another partition than the one asked for.
        """
        from lakehouse.errors import SourceError

        failures: list[str] = []

        def acknowledged(record: Any) -> Any:
            def callback(error: Any, message: Any) -> None:
                if error is not None:
                    failures.append(error.str())
                elif message.partition() != record.partition:
                    failures.append(f"partition {message.partition()} != {record.partition}")
                else:
                    record.offset = int(message.offset())

            return callback

        for record in records:
            while True:
                try:
                    self.producer.produce(
                        topic,
                        value=record.value,
                        key=record.key,
                        partition=record.partition,
                        on_delivery=acknowledged(record),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.1)  # local queue full: let deliveries drain
        remaining = self.producer.flush(self.TIMEOUT_S)
        if remaining or failures:
            raise SourceError(
                f"producing to topic {topic!r} on the soak broker {self.bootstrap} failed: "
                f"{remaining} record(s) unacknowledged after {self.TIMEOUT_S} s; "
                + "; ".join(failures[:3])
            )

    def close(self) -> None:
        """Deliver what is queued and drop the client (before the broker stops: a producer
        left behind reconnects to the stopped broker and logs every attempt)."""
        self.producer.flush(self.TIMEOUT_S)
        del self.producer


class Soak:
    """One soak run (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, out: Path, console: Console) -> None:
        self.args, self.out, self.console = args, out, console
        self.t0 = time.monotonic()
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.production_s = args.minutes * 60.0
        ticks = int(self.production_s)
        self.data = data.SoakData(
            seed=args.seed,
            cdc_per_tick=args.cdc_rate,
            probes_per_tick=args.probe_rate,
            malformed_every=args.malformed_every,
            truncate_tick=ticks // 2 if args.truncate else None,
        )
        self.kill_rng = random.Random(f"kills-{args.seed}")
        self.cdc: list[data.CdcRecord] = []
        self.probes: list[data.ProbeRecord] = []
        self.ticks = self.ticks_late = 0
        self.faults: list[dict[str, Any]] = []
        self.unexpected: list[dict[str, Any]] = []
        self.samples: list[RssSample] = []
        self.phase = "starting"
        self.pipelines: dict[str, Pipeline] = {}
        self.tables: dict[str, str] = {}
        self.bootstrap = ""
        self.producer: Producer | None = None
        self.next_kill = 0.0
        self.next_victim = ROLES[0]
        self.drain_s = 0.0
        self.drained = False

    # ------------------------------------------------------------------------ helpers

    def now(self) -> float:
        """Seconds since the soak started."""
        return time.monotonic() - self.t0

    def event(self, text: str) -> None:
        """Print an event (above the live table; a log gets each once)."""
        self.console.print(f"[{self.now():7.1f}s] {text}", highlight=False)

    # -------------------------------------------------------------------------- setup

    def setup(self, bootstrap: str) -> None:
        """Create the topics, write the configuration, define the three pipelines."""
        from lakehouse.sources.kafka_admin import create_topic

        self.bootstrap = bootstrap
        create_topic(bootstrap, data.CDC_TOPIC, data.CDC_PARTITIONS)
        create_topic(bootstrap, data.ORDERS_TOPIC, data.PROBE_PARTITIONS)
        self.producer = Producer(bootstrap)
        tables, state = self.out / "tables", self.out / "checkpoints"
        self.tables = {
            "build": str(tables / "rates"),
            "ingest_dead_letter": str(tables / "rates_dead_letter"),
        }
        for mode in ("rowtime", "proctime"):
            self.tables[f"{mode}_output"] = str(tables / f"orders_{mode}")
            self.tables[f"{mode}_pending"] = str(tables / f"orders_{mode}_pending")
            self.tables[f"{mode}_dead_letter"] = str(tables / f"orders_{mode}_dead_letter")
        config = self.out / "lakehouse.toml"
        config.write_text(self._toml(state))
        cli = [sys.executable, "-m", "lakehouse.cli"]
        argv = {
            "ingest": [*cli, "ingest", "-c", str(config)],
            # the joins start with the ingest, before it has created the build table
            "rowtime": [*cli, "join", "-c", str(config), "--wait-for-build"],
            "proctime": [
                *cli,
                "join",
                "-c",
                str(config),
                "--wait-for-build",
                "--mode",
                "proctime",
                "--watermark",
                "none",
                "--pipeline-id",
                "soak-join-proctime",
                "--output-table",
                self.tables["proctime_output"],
                "--pending-table",
                self.tables["proctime_pending"],
                "--dead-letter-table",
                self.tables["proctime_dead_letter"],
                "--checkpoint",
                str(state / "join-proctime"),
            ],
        }
        env = {k: v for k, v in os.environ.items() if k not in ("LAKEHOUSE_FAILPOINTS",)}
        # the CLI's batch lines go to a file: a wide virtual terminal keeps each on one line
        env.update({"COLUMNS": "400", "PYTHONUNBUFFERED": "1"})
        logs = self.out / "logs"
        logs.mkdir()
        self.pipelines = {role: Pipeline(role, argv[role], logs, env) for role in ROLES}

    def _toml(self, state: Path) -> str:
        a = self.args
        spark_conf = {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": a.driver_memory,
        }
        conf = ", ".join(f'"{k}" = "{v}"' for k, v in spark_conf.items())
        t = self.tables
        return "\n".join(
            [
                "# written by soak/run.py; the processing-time join is this [join] with flags",
                "[spark]",
                f'master = "{a.spark_master}"',
                f"conf = {{ {conf} }}",
                "",
                "[kafka]",
                f'bootstrap_servers = "{self.bootstrap}"',
                "",
                "[ingest]",
                'pipeline_id = "soak-ingest-rates"',
                'source = "kafka"',
                f'topics = ["{data.CDC_TOPIC}"]',
                f'checkpoint = "{state / "ingest"}"',
                f'dead_letter_table = "{t["ingest_dead_letter"]}"',
                'trigger = "processing-time"',
                f'interval = "{a.interval} seconds"',
                "",
                "[[ingest.tables]]",
                f'table = "{t["build"]}"',
                'key = ["currency"]',
                # CDC records of one tick spread over three partitions: the ingest may see
                # one partition a tick ahead of another
                "out_of_orderness_ms = 5000",
                "",
                "[join]",
                'pipeline_id = "soak-join-rowtime"',
                'source = "kafka"',
                f'topics = ["{data.ORDERS_TOPIC}"]',
                f'probe_schema = "{data.PROBE_SCHEMA}"',
                'probe_key = ["currency"]',
                'probe_time = "order_ts"',
                'probe_id = "order_id"',
                f'build_table = "{t["build"]}"',
                f'output_table = "{t["rowtime_output"]}"',
                f'pending_table = "{t["rowtime_pending"]}"',
                f'dead_letter_table = "{t["rowtime_dead_letter"]}"',
                'mode = "rowtime"',
                'join_type = "left"',
                'watermark = "bounded"',
                "out_of_orderness_ms = 5000",
                f'checkpoint = "{state / "join-rowtime"}"',
                'trigger = "processing-time"',
                f'interval = "{a.interval} seconds"',
                "",
            ]
        )

    # ------------------------------------------------------------------------ produce

    def produce(self, tick: data.Tick) -> None:
        """Send one tick (CDC, then orders) and record each record's offset."""
        assert self.producer is not None
        for topic, records in ((data.CDC_TOPIC, tick.cdc), (data.ORDERS_TOPIC, tick.probes)):
            self.producer.send(topic, records)
        self.cdc += tick.cdc
        self.probes += tick.probes
        self.ticks += 1

    # ------------------------------------------------------------------- supervision

    def supervise(self, *, kills: bool) -> None:
        """Read the logs, restart a pipeline that exited on its own, inject a due fault."""
        for p in self.pipelines.values():
            p.poll_log()
            if p.batches and self.faults:
                for f in self.faults:
                    if (
                        f["role"] == p.role
                        and f["incarnation"] == p.incarnation - 1
                        and f.get("recovered_after_s") is None
                    ):
                        f["recovered_after_s"] = self.now() - f["restarted_at_s"]
                        self.event(
                            f"{p.role}: first batch {f['recovered_after_s']:.0f} s after restart"
                        )
            if p.proc is not None and not p.running:
                code = p.proc.returncode
                self.unexpected.append(
                    {
                        "role": p.role,
                        "incarnation": p.incarnation,
                        "code": code,
                        "at_s": self.now(),
                        "log": str(p.log_path),
                        "tail": p.log_tail(),
                    }
                )
                self.event(
                    f"[red]{p.role} exited on its own with {code}[/] ({p.log_path}); restarting"
                )
                p.start()
        victim = self.pipelines[self.next_victim]
        # a pipeline is killed only once it completed a batch since its last start: kills
        # that always land in a (slow) startup would leave nothing to soak
        if kills and self.now() >= self.next_kill and victim.running and victim.batches:
            batches, incarnation = victim.batches, victim.incarnation
            at = self.now()
            pids = victim.kill()
            victim.start()
            self.faults.append(
                {
                    "at_s": at,
                    "role": victim.role,
                    "incarnation": incarnation,
                    "batches": batches,
                    "delayed_s": round(at - self.next_kill, 1),
                    "processes": len(pids),
                    "restarted_at_s": self.now(),
                    "recovered_after_s": None,
                }
            )
            self.event(
                f"[bold red]SIGKILL[/] {victim.role} (incarnation {incarnation}, {batches} "
                f"batches, {len(pids)} processes); restarted as incarnation {victim.incarnation}"
            )
            self.schedule_kill()

    def schedule_kill(self) -> None:
        """The next fault: a random pipeline, ``--kill-every`` seconds from now ± 30 %."""
        self.next_kill = self.now() + self.args.kill_every * self.kill_rng.uniform(0.7, 1.3)
        self.next_victim = self.kill_rng.choice(ROLES)

    def sample(self) -> None:
        """One RSS sample of every running pipeline."""
        table = process_table()
        at = self.now()
        for p in self.pipelines.values():
            s = p.sample(at, table)
            if s is not None:
                self.samples.append(s)

    # ------------------------------------------------------------------------- phases

    def run_production(self, live: Live) -> None:
        """Produce ticks for ``--minutes``, with faults; sample memory."""
        self.phase = "producing"
        for p in self.pipelines.values():
            p.start()
        self.event(f"started {', '.join(ROLES)}; producing for {self.args.minutes:g} min")
        self.schedule_kill()
        next_tick = next_sample = self.now()
        last_status = 0.0
        while self.now() < self.production_s:
            if self.now() >= next_tick:
                self.produce(self.data.tick())
                next_tick += 1.0
                if self.now() > next_tick:  # the machine is slow: stay steady, do not burst
                    self.ticks_late += 1
                    next_tick = self.now() + 1.0
            self.supervise(kills=True)
            if self.now() >= next_sample:
                self.sample()
                next_sample += self.args.sample_every
            if self.now() - last_status >= 60:
                last_status = self.now()
                self.status_line()
            live.update(self.render())
            time.sleep(max(0.0, min(next_tick, next_sample) - self.now(), 0.05))

    def status_line(self) -> None:
        """A one-line summary every minute (for logs, where the live table does not show)."""
        parts = [
            f"{p.role} #{p.incarnation} {p.batches_total} batches"
            + (f" {self._rss_now(p.role)} MiB" if self._rss_now(p.role) else "")
            for p in self.pipelines.values()
        ]
        self.event(
            f"{self.ticks} ticks, {len(self.cdc)} CDC, {len(self.probes)} orders, "
            f"{len(self.faults)} kills; " + "; ".join(parts)
        )

    def _rss_now(self, role: str) -> int | None:
        for s in reversed(self.samples[-12:]):
            if s.role == role:
                return round(s.total / MIB)
        return None

    def run_drain(self, live: Live) -> None:
        """Send the final records; wait until everything is committed and released."""
        self.phase = "draining"
        self.produce(self.data.final())
        self.event("production stopped; final records sent; draining")
        started = self.now()
        cdc_ends: dict[int, int] = {}
        for r in self.cdc:
            assert r.offset is not None
            cdc_ends[r.partition] = max(cdc_ends.get(r.partition, 0), r.offset + 1)
        sentinels = data.PROBE_PARTITIONS
        stable = 0
        next_sample = self.now()
        while self.now() - started < self.args.drain_timeout:
            self.supervise(kills=False)
            if self.now() >= next_sample:
                self.sample()
                next_sample += self.args.sample_every
            live.update(self.render())
            done = self._ingest_caught_up(cdc_ends) and all(
                self._join_drained(mode, sentinels if mode == "rowtime" else 0)
                for mode in ("rowtime", "proctime")
            )
            stable = stable + 1 if done else 0
            if stable >= 2:
                self.drained = True
                break
            time.sleep(DRAIN_POLL_S)
        self.drain_s = self.now() - started
        self.event(
            f"drained in {self.drain_s:.0f} s"
            if self.drained
            else f"[red]not drained after {self.drain_s:.0f} s[/]: verifying what is there"
        )

    def _ingest_caught_up(self, ends: dict[int, int]) -> bool:
        from lakehouse import delta

        if not delta.table_exists(self.tables["build"]):
            return False
        running: dict[int, int] = {}
        for entry in delta.history(self.tables["build"]):
            text = entry.metadata.get(META_END_OFFSETS)
            if text:
                for p, o in json.loads(text).get(data.CDC_TOPIC, {}).items():
                    running[int(p)] = max(running.get(int(p), 0), int(o))
        return all(running.get(p, 0) >= o for p, o in ends.items())

    def _join_drained(self, mode: str, waiting: int) -> bool:
        from lakehouse import delta

        out, pending, dead = (
            self.tables[f"{mode}_output"],
            self.tables[f"{mode}_pending"],
            self.tables[f"{mode}_dead_letter"],
        )
        if not (delta.table_exists(out) and delta.table_exists(pending)):
            return False
        pending_rows = delta.row_count(pending)
        accounted = delta.row_count(out) + pending_rows
        if delta.table_exists(dead):
            accounted += delta.row_count(dead)
        return accounted >= len(self.probes) and pending_rows <= waiting

    def stop(self) -> dict[str, int | None]:
        """Stop every pipeline cleanly (SIGINT); their exit codes."""
        self.phase = "stopping"
        codes: dict[str, int | None] = {}
        for role, p in self.pipelines.items():
            codes[role] = p.stop(STOP_TIMEOUT_S)
            self.event(f"{role} stopped: exit code {codes[role]}")
        return codes

    # ------------------------------------------------------------------------ display

    def render(self) -> Group:
        """The live view: the figures and the pipelines."""
        elapsed = self.now()
        head = (
            f"[bold]soak[/] seed {self.args.seed} — {self.phase} — {elapsed / 60:.1f} / "
            f"{self.args.minutes:g} min — {self.ticks} ticks, {len(self.cdc)} CDC records, "
            f"{len(self.probes)} orders — {len(self.faults)} SIGKILLs"
            + (
                f", next ({self.next_victim}) in {max(0.0, self.next_kill - elapsed):.0f} s"
                if self.phase == "producing"
                else ""
            )
        )
        table = Table("pipeline", "pid", "#", "up", "batches", "RSS MiB", "last batch")
        for p in self.pipelines.values():
            up = time.monotonic() - p.started_at if p.running else 0.0
            rss = self._rss_now(p.role)
            table.add_row(
                p.role,
                str(p.proc.pid) if p.proc is not None else "-",
                str(p.incarnation),
                f"{up:.0f}s" if p.running else "[red]down[/]",
                f"{p.batches} / {p.batches_total}",
                "-" if rss is None else str(rss),
                p.last_line[:110],
            )
        return Group(head, table)

    # ------------------------------------------------------------------------- report

    def summary(self, stop_codes: dict[str, int | None]) -> dict[str, Any]:
        """The run's figures for the report (the verification adds its own)."""
        records = {
            "cdc_total": len(self.cdc),
            "cdc_changes": sum(r.kind == "change" for r in self.cdc),
            "cdc_tombstones": sum(r.kind == "tombstone" for r in self.cdc),
            "cdc_malformed": sum(r.kind == "malformed" for r in self.cdc),
            "probe_total": len(self.probes),
            "probes": sum(r.kind == "probe" for r in self.probes),
            "probes_malformed": sum(r.kind == "malformed" for r in self.probes),
            "sentinels": data.PROBE_PARTITIONS,
            "ticks": self.ticks,
            "ticks_late": self.ticks_late,
        }
        restarts = {role: p.incarnation - 1 for role, p in self.pipelines.items()}
        problems = [
            f"{e['role']} exited on its own with {e['code']} at {e['at_s']:.0f} s"
            for e in self.unexpected
        ]
        problems += [
            f"{role} did not stop cleanly (exit code {code})"
            for role, code in stop_codes.items()
            if code != 0
        ]
        if not self.drained:
            problems.append(f"the pipelines did not drain within {self.args.drain_timeout} s")
        return {
            "seed": self.args.seed,
            "started_at": self.started_at,
            "args": vars(self.args),
            "out": str(self.out),
            "production_s": round(self.production_s),
            "duration_s": round(self.now()),
            "drain_s": round(self.drain_s),
            "drained": self.drained,
            "kill_every_s": self.args.kill_every,
            "records": records,
            "faults": self.faults,
            "restarts": restarts,
            "unexpected_exits": self.unexpected,
            "stop_codes": stop_codes,
            "rss": {
                role: rss_summary(
                    [s for s in self.samples if s.role == role],
                    run_s=self.production_s,
                    jvm_heap_bytes=parse_memory(self.args.driver_memory),
                )
                for role in ROLES
            },
            "commands": {role: shlex.join(p.argv) for role, p in self.pipelines.items()},
            "problems": problems,
        }


def _verify(soak: Soak) -> Any:
    from lakehouse.spark import get_spark
    from soak.verify import verify

    spark = get_spark(
        app_name="soak-verify",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    try:
        return verify(spark, tables=soak.tables, cdc=soak.cdc, probes=soak.probes)
    finally:
        spark.stop()


def run(args: argparse.Namespace) -> int:
    """Run the soak; 0 when it passed, 1 when it failed, 2 when ``--out`` is not clearable."""
    from lakehouse.errors import LakehouseError
    from lakehouse.testing.broker import kafka_broker

    console = Console(highlight=False)
    out = Path(args.out).resolve()
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        console.print(
            f"[red]error:[/] --out {out} is a non-empty directory that no soak run wrote; the "
            "soak clears its output directory first. Give a new or empty directory."
        )
        return 2
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / MARKER).write_text("written by soak/run.py; cleared by the next run\n")
    soak = Soak(args, out, console)
    stop_codes: dict[str, int | None] = {}
    verification = None
    try:
        with kafka_broker(out / "broker") as broker:
            bootstrap = broker.bootstrap
            soak.setup(bootstrap)
            console.print(f"[bold]soak[/] — broker {bootstrap}; output {out}")
            try:
                with Live(soak.render(), console=console, refresh_per_second=2) as live:
                    soak.run_production(live)
                    soak.run_drain(live)
            finally:
                if not console.is_terminal:
                    console.line()  # the live view's last frame ends without a newline there
                stop_codes = soak.stop()
                if soak.producer is not None:
                    soak.producer.close()
                    soak.producer = None
        soak.phase = "verifying"
        soak.event("verifying the tables against the reference")
        verification = _verify(soak)
    except LakehouseError as e:
        console.print(f"[red]error:[/] {e}")
        soak.event(f"soak aborted: {e}")
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: writing the report of what ran[/]")
        if not stop_codes:
            stop_codes = soak.stop()
    write_rss_csv(out / "rss.csv", soak.samples)
    summary = soak.summary(stop_codes)
    passed = write_report(out, summary, verification)
    _print_verdict(console, out, verification, passed)
    return 0 if passed else 1


def _print_verdict(console: Console, out: Path, verification: Any, passed: bool) -> None:
    if verification is not None:
        table = Table("check", "result", "detail", title="soak checks", title_justify="left")
        for c in verification.checks:
            table.add_row(c.name, "[green]pass[/]" if c.passed else "[red]FAIL[/]", c.detail)
        console.print(table)
    verdict = "[bold green]PASSED[/]" if passed else "[bold red]FAILED[/]"
    console.print(f"soak {verdict} — report: {out / 'report.md'}")


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the soak."""
    parser = argparse.ArgumentParser(
        prog="python -m soak.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes of input")
    parser.add_argument(
        "--kill-every", type=float, default=180.0, help="seconds between SIGKILLs (± 30 %%)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the input and the kills")
    parser.add_argument("--out", default="soak/out", help="output directory (cleared first)")
    parser.add_argument("--cdc-rate", type=int, default=2, help="CDC changes per second")
    parser.add_argument("--probe-rate", type=int, default=8, help="orders per second")
    parser.add_argument(
        "--malformed-every", type=int, default=60, help="one malformed record each, every N s"
    )
    parser.add_argument(
        "--no-truncate", dest="truncate", action="store_false", help="no truncate mid-run"
    )
    parser.add_argument("--interval", type=int, default=5, help="pipelines' trigger interval, s")
    parser.add_argument("--sample-every", type=float, default=5.0, help="RSS sampling period, s")
    parser.add_argument(
        "--drain-timeout", type=float, default=600.0, help="bound on the final drain, s"
    )
    parser.add_argument("--spark-master", default="local[2]", help="each pipeline's master")
    parser.add_argument("--driver-memory", default="1g", help="each pipeline's driver heap")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.kill_every <= 0:
        parser.error("--minutes and --kill-every must be positive")
    try:
        parse_memory(args.driver_memory)
    except ValueError:
        parser.error(f"--driver-memory {args.driver_memory!r} is not a JVM size like 1g or 768m")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
