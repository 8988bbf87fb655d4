"""What a streaming job touches, and the guard every start of its query passes.

A job is the CDC ingest (:class:`~lakehouse.config.IngestOptions`) or the temporal join
(:class:`~lakehouse.join.JoinOptions`). Its tables have roles (:class:`TableRole`): the
ingest writes its build tables and its dead-letter table; the join reads its build table and
writes its output, pending and dead-letter tables. Before a query starts on a checkpoint,
:func:`guard` checks, in this order and without Spark:

1. no file of the checkpoint or of the tables is damaged (:func:`lakehouse.recovery.check`):
   a file Spark or Delta cannot parse is named in one line, with the repair;
2. every table is of its role's kind (:mod:`lakehouse.table_kinds`): a join whose build
   table is an output table would wait forever;
3. the checkpoint belongs to this pipeline and these tables
   (:func:`lakehouse.checkpoint.check_binding`);
4. no other live job writes the tables: it takes their writer lease
   (:func:`lakehouse.lease.acquire`), which the caller holds while the query runs.

The command line runs the same checks before Spark starts, so a mistake costs no JVM start;
a job with a table given by catalog name runs them once Spark is up and :func:`resolve_tables`
has turned the names into locations (every check works on locations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, TypeVar

from lakehouse.config import IngestOptions
from lakehouse.join.options import JoinOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lease import WriterLease
    from lakehouse.table_kinds import TableKind

#: The two streaming jobs, as the commands and their settings sections name them.
Job = Literal["ingest", "join"]
#: The options of either job.
JobOptions = IngestOptions | JoinOptions
J = TypeVar("J", bound=IngestOptions | JoinOptions)


def job_of(options: JobOptions) -> Job:
    """The job that ``options`` describe."""
    return "ingest" if isinstance(options, IngestOptions) else "join"


class TableRole(NamedTuple):
    """A table a job uses: the setting that names it (TOML key and flag), its location, the
    kind it must be, and whether the job writes it (a join only reads its build table)."""

    setting: str
    uri: str
    kind: TableKind
    writes: bool = True


def table_roles(options: JobOptions) -> list[TableRole]:
    """The tables a job reads or writes (:class:`TableRole`)."""
    from lakehouse.table_kinds import TableKind

    if isinstance(options, IngestOptions):
        flag = " (--table)" if len(options.tables) == 1 else ""
        return [
            *(
                TableRole(f"ingest.tables[{n}].table{flag}", t.table, TableKind.BUILD)
                for n, t in enumerate(options.tables)
            ),
            TableRole(
                "ingest.dead_letter_table (--dead-letter-table)",
                options.dead_letter_table,
                TableKind.DEAD_LETTER,
            ),
        ]
    return [
        TableRole("join.build_table (--build-table)", options.build_table, TableKind.BUILD, False),
        TableRole("join.output_table (--output-table)", options.output_table, TableKind.OUTPUT),
        TableRole("join.pending_table (--pending-table)", options.pending_table, TableKind.PENDING),
        TableRole(
            "join.dead_letter_table (--dead-letter-table)",
            options.dead_letter_table,
            TableKind.DEAD_LETTER,
        ),
    ]


def has_catalog_names(options: JobOptions) -> bool:
    """Whether a table of the job is given by catalog name (:mod:`lakehouse.delta.names`):
    then the checks run once Spark is up and the names are resolved."""
    from lakehouse.delta.names import is_catalog_name

    return any(is_catalog_name(role.uri) for role in table_roles(options))


def resolve_tables(spark: SparkSession, options: J) -> J:
    """``options`` with each table given by catalog name replaced by its location
    (:func:`lakehouse.delta.names.resolve`); the same object when every table is a location.

    Raises:
        ConfigError: a name is a table of another format, or its schema does not exist.
    """
    from lakehouse.delta.names import resolve

    if not has_catalog_names(options):
        return options
    if isinstance(options, IngestOptions):
        tables = [
            t.model_copy(
                update={"table": resolve(spark, t.table, setting=f"ingest.tables[{n}].table")}
            )
            for n, t in enumerate(options.tables)
        ]
        dead = resolve(spark, options.dead_letter_table, setting="ingest.dead_letter_table")
        return options.model_copy(update={"tables": tables, "dead_letter_table": dead})
    fields = ("build_table", "output_table", "pending_table", "dead_letter_table")
    return options.model_copy(
        update={f: resolve(spark, getattr(options, f), setting=f"join.{f}") for f in fields}
    )


def written_tables(options: JobOptions) -> list[str]:
    """The tables a job leases (:mod:`lakehouse.lease`): the build tables of the ingest; the
    output and pending tables of a join (dead-letter tables are shared, not leased)."""
    if isinstance(options, IngestOptions):
        return [t.table for t in options.tables]
    return [options.output_table, options.pending_table]


def damage_checked(options: JobOptions) -> tuple[list[str], list[str]]:
    """The tables a start checks for damage (:mod:`lakehouse.recovery`): those the job writes,
    in the order each batch writes them (its dead-letter table, then the build tables; or
    the output, then the pending table), and those it only reads."""
    read = [] if isinstance(options, IngestOptions) else [options.build_table]
    return [options.dead_letter_table, *written_tables(options)], read


def repair_command(job: Job) -> str:
    """The command that repairs a job's damaged files (named in the refusal)."""
    return f"lakehouse repair {job} -c <this job's configuration>"


def check_damage(options: JobOptions, checkpoint: str) -> None:
    """Refuse a job whose checkpoint or tables hold a damaged file.

    Raises:
        DamagedStateError: naming the file, what is wrong and the repair.
    """
    from lakehouse.recovery import check

    written, read = damage_checked(options)
    check(checkpoint, written, read, repair=repair_command(job_of(options)))


def check_table_kinds(options: JobOptions) -> None:
    """Refuse a job given a table of the wrong kind (:mod:`lakehouse.table_kinds`).

    Raises:
        ConfigError: one line naming the setting, the table, its kind and the kind expected.
    """
    from lakehouse.table_kinds import check_kind

    for role in table_roles(options):
        check_kind(role.uri, role.kind, setting=role.setting, writes=role.writes)


def guard(
    options: JobOptions,
    checkpoint: str,
    *,
    query_name: str,
    lease_timeout_ms: int,
    take_over: bool = False,
) -> WriterLease:
    """Check a job before its query starts on ``checkpoint`` (the module's four checks) and
    take the writer lease of the tables it writes. The caller releases the lease when the
    job ends (:meth:`~lakehouse.lease.WriterLease.watch` does it when the query stops).

    Raises:
        DamagedStateError: a damaged file.
        ConfigError: a table of the wrong kind, or a checkpoint bound to another pipeline.
        WriterLeaseError: another live job holds a lease (unless ``take_over``).
    """
    from lakehouse.checkpoint import check_binding
    from lakehouse.lease import acquire

    check_damage(options, checkpoint)
    check_table_kinds(options)
    tables = written_tables(options)
    check_binding(checkpoint, options.pipeline_id, tables)
    return acquire(
        tables,
        command=job_of(options),
        pipeline_id=options.pipeline_id,
        query_name=query_name,
        checkpoint=checkpoint,
        timeout_ms=lease_timeout_ms,
        take_over=take_over,
    )
