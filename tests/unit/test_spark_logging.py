"""What lakehouse's Spark sessions print and keep alive: the heartbeat race of Spark 4.2.

Spark 4.2's in-memory cache registers a ``PartitionKeyedAccumulator`` that the executor's
heartbeat can read half-deserialized (SPARK-59451). Filtered for zero values on the executor,
the NullPointerException ends the heartbeat thread; sent whole, the driver meets it instead and
loses one heartbeat. These tests hold the session default and the log filters that go with it,
against the messages Spark 4.2 printed when the race was provoked (heartbeat every 10 ms over a
cached frame).
"""

from __future__ import annotations

import re
from pathlib import Path

from lakehouse.spark import DEFAULT_CONF

LOG4J = Path(__file__).resolve().parents[2] / "lakehouse" / "log4j2.properties"


def _properties() -> dict[str, str]:
    lines = LOG4J.read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def _denied(logger: str, message: str) -> bool:
    """Whether a DENY RegexFilter of the logger configured for ``logger`` matches ``message``."""
    props = _properties()
    (prefix,) = [
        k[: -len(".name")] for k, v in props.items() if k.endswith(".name") and v == logger
    ]
    filters = {k.rsplit(".", 1)[0] for k in props if k.startswith(f"{prefix}.filter.")}
    return any(
        props[f"{f}.onMatch"] == "DENY" and re.fullmatch(props[f"{f}.regex"], message)
        for f in filters
    )


def test_the_heartbeat_sends_every_accumulator_so_the_race_cannot_end_its_thread():
    assert DEFAULT_CONF["spark.executor.heartbeat.dropZeroAccumulatorUpdates"] == "false"


def test_the_race_s_two_traces_are_filtered_and_a_lost_driver_is_not():
    utils, executor = "org.apache.spark.util.Utils", "org.apache.spark.executor.Executor"
    assert _denied(utils, "Uncaught exception in thread heartbeat-receiver-event-loop-thread")
    assert _denied(executor, "Issue communicating with driver in heartbeater")
    # what still reaches the user: the heartbeat thread's own death, and the executor's exit
    assert not _denied(utils, "Uncaught exception in thread executor-heartbeater")
    assert not _denied(executor, "Exit as unable to send heartbeats to driver more than 60 times")
