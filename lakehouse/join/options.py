"""Options of the temporal join: one typed, frozen object, validated when it is made.

:class:`JoinOptions` is the one declaration of the join's settings: the Python API takes it
(:func:`lakehouse.temporal_join`), the ``[join]`` TOML section is it plus where the probe
records come from (:class:`lakehouse.config.JoinConfig`), and ``lakehouse join``'s flags fill
the same fields by the same names. Each field's docstring is its meaning, shown by ``--help``
and by the generated configuration reference.

>>> o = JoinOptions(build_table="b", output_table="o", pending_table="p", dead_letter_table="d",
...                 pipeline_id="j", probe_schema="k string, ts bigint", probe_key=["k"],
...                 probe_time="ts", mode="proctime")
>>> o.probe_key, o.watermark          # lists become tuples; proctime's watermark is 'none'
(('k',), 'none')
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lakehouse.errors import ConfigError

JoinMode = Literal["rowtime", "proctime"]
JoinType = Literal["inner", "left"]
WatermarkKind = Literal["bounded", "ascending", "none"]
LatePolicy = Literal["join", "dead-letter"]
ExpiryPolicy = Literal["release", "dead-letter"]
PendingBoundPolicy = Literal["dead-letter", "fail"]
TimeUnit = Literal["s", "ms", "us"]
#: Milliseconds per unit of an epoch number in a time column.
MS_PER_UNIT: dict[str, float] = {"s": 1000.0, "ms": 1.0, "us": 0.001}
#: Default of ``max_future_ms``: a day past the wall clock.
DEFAULT_MAX_FUTURE_MS = 86_400_000


class JoinOptions(BaseModel):
    """How a probe stream joins a build table.

    Invariants (checked when the object is made, before any Spark work): the four tables
    are four different locations; a row-time join, and any event-time watermark, has a
    ``probe_time``; ``build_key`` (when given) pairs up with ``probe_key``;
    ``build_complete`` comes with ``until_complete``. A value of the wrong type or outside
    its range raises pydantic's ``ValidationError``; a contradiction between settings raises
    :class:`~lakehouse.errors.ConfigError` naming the setting. Frozen: a running join's
    options never change (make another with ``model_copy(update=...)``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    build_table: str
    """The versioned build table the ingest writes. Each table setting is a location (a path or
    URI) or a catalog name (`schema.table`, `catalog.schema.table`).
    """
    output_table: str
    """Where joined rows are appended."""
    pending_table: str
    """Probe rows still waiting (rewritten when it changes)."""
    dead_letter_table: str
    """Malformed probe records, and the rows the late, expiry and pending-bound policies reject."""
    pipeline_id: str
    """Stable id of the pipeline: the Delta transaction app id of every write. Keep it across
    restarts; it is bound to its checkpoint.
    """
    probe_schema: str
    """DDL of the probe records' JSON, e.g. `"order_id bigint, currency string, order_ts
    timestamp"`.
    """
    probe_key: tuple[str, ...]
    """Probe columns matching the build key, in key order."""
    probe_time: str | None = None
    """Probe event-time column (timestamp, or an epoch number in `probe_time_unit`); required
    for `rowtime`.
    """
    probe_id: str | None = None
    """Probe row id column (used by the quality report)."""
    build_key: tuple[str, ...] = ()
    """Build key columns, paired with `probe_key`; default the build table's
    `lakehouse.primaryKey`.
    """
    mode: JoinMode = "rowtime"
    """`rowtime` joins each row as of its own time; `proctime` joins the latest version, only
    once the snapshot is complete.
    """
    join_type: JoinType = "inner"
    """`inner` emits matched rows only; `left` every released row (`_matched = false` and NULL
    build columns when nothing matched).
    """
    watermark: WatermarkKind = "bounded"
    """The probe's watermark: `bounded`, `ascending` or `none`; unset, `bounded` for `rowtime`
    and `none` for `proctime` (FLIP-326: the probe side gives no event-time watermark unless
    one is set, so every row is released once the snapshot is complete).
    """
    out_of_orderness_ms: int = Field(default=0, ge=0)
    """Probe lateness the `bounded` watermark allows."""
    late_policy: LatePolicy = "join"
    """A row already behind the watermark when it arrives: `join` it (released at once,
    `_released_by = 'late'`) or `dead-letter` it.
    """
    build_idle_timeout_ms: int | None = Field(default=None, gt=0)
    """A build table without commits for this long (once its snapshot is complete) stops holding
    back the watermark; off by default.
    """
    pending_ttl_ms: int | None = Field(default=None, gt=0)
    """A row pending longer than this is expired, by `expiry_policy`; off by default."""
    expiry_policy: ExpiryPolicy = "release"
    """Expired rows: `release` them, joined as of their time (`_released_by = 'expiry'`), or
    `dead-letter` them.
    """
    build_prefix: str = ""
    """Prefix of the build columns in the output (needed when names clash)."""
    pending_max_rows: int | None = Field(default=None, gt=0)
    """The most rows the pending table may hold after a batch; off by default."""
    pending_max_age_ms: int | None = Field(default=None, gt=0)
    """The oldest a pending row may be: in event time, how far behind the probe watermark; with
    `watermark = "none"`, since arrival. Off by default.
    """
    on_pending_bound: PendingBoundPolicy = "dead-letter"
    """Rows over the pending bound: `dead-letter` (the oldest, for replay) or `fail` (stop the
    join).
    """
    probe_time_unit: TimeUnit = "ms"
    """Unit of an epoch number in the probe time column, also one declared `timestamp`: `s`,
    `ms` or `us`.
    """
    max_future_ms: int | None = Field(default=DEFAULT_MAX_FUTURE_MS, gt=0)
    """A probe row whose time is further than this past the wall clock is dead-lettered
    (`future_time`).
    """
    until_complete: bool = False
    """End the probe input at the end of an `available-now` run and release every row the build
    side can answer.
    """
    build_complete: bool = False
    """With `until_complete`: the build side is complete too, so the end releases every row once
    the snapshot marker is set.
    """
    allow_dead_letters: bool = False
    """Accept batches whose probe records are all dead-lettered."""

    @model_validator(mode="before")
    @classmethod
    def _watermark_by_mode(cls, data: Any) -> Any:
        # an unset watermark is chosen by the mode: FLIP-326's processing-time watermark for
        # proctime, the bounded event-time one for rowtime
        if isinstance(data, dict) and data.get("watermark") is None:
            mode = data.get("mode", "rowtime")
            return {**data, "watermark": "none" if mode == "proctime" else "bounded"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> JoinOptions:
        def bad(setting: str, message: str) -> ConfigError:
            return ConfigError(f"join setting '{setting}': {message}", setting=setting)

        if not self.probe_key:
            raise bad("probe_key", "name the probe column(s) that match the build key")
        if not self.probe_schema.strip():
            raise bad(
                "probe_schema",
                "give the probe records' schema as DDL, e.g. "
                "'id bigint, currency string, ts timestamp'",
            )
        if self.mode == "rowtime" and not self.probe_time:
            raise bad("probe_time", "row-time joins need the probe's event-time column")
        if self.watermark != "none" and not self.probe_time:
            raise bad(
                "probe_time",
                f"the '{self.watermark}' watermark needs the probe's "
                "event-time column; set probe_time or use watermark='none'",
            )
        if self.build_key and len(self.build_key) != len(self.probe_key):
            raise bad(
                "build_key",
                f"has {len(self.build_key)} column(s) but probe_key has "
                f"{len(self.probe_key)}; they pair up in order",
            )
        if self.build_complete and not self.until_complete:
            raise bad(
                "build_complete",
                "says the build side is complete at the end of the probe input; it needs "
                "until_complete (lakehouse join --until-complete --build-complete)",
            )
        if (
            len({self.build_table, self.output_table, self.pending_table, self.dead_letter_table})
            < 4
        ):
            raise bad(
                "output_table",
                "build, output, pending and dead-letter tables must be four different locations",
            )
        return self
