"""A throwaway PostgreSQL cluster with logical decoding, for the Debezium tests.

The server binaries of the machine's PostgreSQL (Debian: package ``postgresql``, under
``/usr/lib/postgresql/<major>/bin``; elsewhere ``initdb`` on the ``PATH``; or the folder
``LAKEHOUSE_PG_BINDIR``) run a new cluster: ``initdb`` into a temporary directory, then
``postgres`` with ``wal_level=logical`` (``pgoutput``, the plugin Debezium uses, is built in),
listening only on 127.0.0.1 on a free port, its unix socket in its own directory, with
``track_commit_timestamp=on`` (so ``pg_xact_commit_timestamp(xmin)`` gives a row's commit
time, the instant Debezium sends as ``source.ts_ms``). It is
stopped by its process id (SIGINT, PostgreSQL's fast shutdown; SIGKILL after a timeout) and
its directory removed.

PostgreSQL refuses to run as root: run as root (CI), the cluster belongs to the user
``postgres`` (which Debian's package creates) and its directory is made for it under the
system's temporary directory (pytest's own, ``/tmp/pytest-of-root``, is closed to other
users); run as anyone else, it belongs to that user.

Usage::

    with postgres_cluster() as pg:
        pg.create_database("shop")
        pg.execute("shop", "CREATE TABLE public.rates (currency text PRIMARY KEY, rate numeric)")
        pg.create_replication_user("debezium", "secret")
        ...  # Debezium connects to pg.host:pg.port as debezium/secret

Local connections (the unix socket) need no password: they are the tests' own, as the
cluster's superuser ``postgres``. TCP connections need a password (SCRAM-SHA-256), as a
connector's do in production.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lakehouse.errors import EnvironmentSetupError
from lakehouse.testing.broker import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
#: The cluster's superuser (``initdb -U``), reached through the unix socket without password.
SUPERUSER = "postgres"
#: The operating-system user that runs the cluster when lakehouse runs as root.
OS_USER_WHEN_ROOT = "postgres"

_INSTALL_HINT = (
    "install PostgreSQL's server (Debian/Ubuntu: 'apt-get install -y postgresql', which "
    "'.ci/run' does when it runs as root; macOS: 'brew install postgresql'), or set "
    "LAKEHOUSE_PG_BINDIR to the folder that holds initdb and postgres"
)


def _major(folder: Path) -> int:
    match = re.search(r"/(\d+)/bin$", folder.as_posix())
    return int(match.group(1)) if match else -1


def postgres_bindir() -> Path:
    """The folder of the PostgreSQL server binaries (``initdb``, ``postgres``).

    ``LAKEHOUSE_PG_BINDIR`` when set; else the newest ``/usr/lib/postgresql/<major>/bin``
    (Debian's layout, whose ``PATH`` holds only client wrappers); else the folder of
    ``initdb`` on the ``PATH``.

    Raises:
        EnvironmentSetupError: no PostgreSQL server is installed.
    """
    given = os.environ.get("LAKEHOUSE_PG_BINDIR")
    if given:
        folder = Path(given)
        if not (folder / "initdb").exists() or not (folder / "postgres").exists():
            raise EnvironmentSetupError(
                f"LAKEHOUSE_PG_BINDIR is '{folder}', which holds no initdb and postgres"
            )
        return folder
    debian = [
        p.parent
        for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")
        if (p.parent / "postgres").exists()
    ]
    if debian:
        return max(debian, key=_major)
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).parent / "postgres").exists():
        return Path(initdb).parent
    raise EnvironmentSetupError(
        "PostgreSQL's server (initdb, postgres) was not found: the Debezium tests and "
        f"'lakehouse demo --source postgres' run a throwaway cluster; {_INSTALL_HINT}"
    )


def _os_user() -> tuple[int, int] | None:
    """``(uid, gid)`` to run the server as, or None to run as the current user."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(OS_USER_WHEN_ROOT)
    except KeyError:
        raise EnvironmentSetupError(
            f"PostgreSQL refuses to run as root and there is no user '{OS_USER_WHEN_ROOT}' to "
            f"run it as; {_INSTALL_HINT} (the package creates the user), or run the tests "
            "as another user"
        ) from None
    return entry.pw_uid, entry.pw_gid


def psycopg_driver() -> Any:
    """The ``psycopg`` module (SQL to the cluster goes through it).

    Raises:
        EnvironmentSetupError: it is not installed (a dev dependency).
    """
    try:
        import psycopg
    except ImportError:
        raise EnvironmentSetupError(
            "psycopg (the PostgreSQL driver the Debezium tests and 'lakehouse demo --source "
            "postgres' run SQL with) is not installed; "
            "run 'make' (it installs the dev dependencies of constraints.txt), or "
            "'pip install -c constraints.txt \"psycopg[binary]\"'"
        ) from None
    return psycopg


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class PostgresCluster:
    """One PostgreSQL cluster with ``wal_level=logical``; see the module docstring.

    The directory (data, socket, ``postgres.log``) is created by :meth:`start` and removed
    by :meth:`stop`. ``start`` waits until the server accepts connections.
    """

    def __init__(self, *, max_replication_slots: int = 16, log_level: str = "warning") -> None:
        self.bindir = postgres_bindir()
        self.port = free_port()
        self.max_replication_slots = max_replication_slots
        self.log_level = log_level
        self.directory: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._owner = _os_user()

    @property
    def host(self) -> str:
        """The TCP address the server listens on (loopback only)."""
        return "127.0.0.1"

    @property
    def pid(self) -> int | None:
        """Process id of the running server (the postmaster), or None."""
        return self.process.pid if self.process is not None else None

    @property
    def socket_dir(self) -> Path:
        """The folder of the server's unix socket."""
        assert self.directory is not None, "the cluster is not started"
        return self.directory / "socket"

    @property
    def log_path(self) -> Path:
        """The server's log (its stderr)."""
        assert self.directory is not None, "the cluster is not started"
        return self.directory / "postgres.log"

    @property
    def version(self) -> str:
        """``postgres --version`` of the binaries (e.g. ``postgres (PostgreSQL) 15.18``)."""
        done = subprocess.run(
            [str(self.bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip()

    def _run_as_owner(self) -> dict[str, Any]:
        if self._owner is None:
            return {}
        uid, gid = self._owner
        return {"user": uid, "group": gid, "extra_groups": []}

    def _make_directory(self) -> Path:
        # Under the system's temporary directory, not pytest's: the server's user must reach
        # it, and /tmp/pytest-of-root is closed to every user but root.
        directory = Path(tempfile.mkdtemp(prefix="lakehouse-pg-"))
        (directory / "socket").mkdir()
        if self._owner is not None:
            uid, gid = self._owner
            for path in (directory, directory / "socket"):
                os.chown(path, uid, gid)
        return directory

    def _initdb(self) -> None:
        assert self.directory is not None
        done = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.directory / "data"),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=START_TIMEOUT_S,
            cwd=self.directory,
            **self._run_as_owner(),
        )
        if done.returncode != 0:
            raise EnvironmentSetupError(
                f"initdb ({self.bindir / 'initdb'}) failed with exit {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def start(self) -> PostgresCluster:
        """Create the cluster, start the server and wait until it accepts connections.

        Raises:
            EnvironmentSetupError: PostgreSQL or its user is missing, ``initdb`` fails, or
                the server exits or does not answer within ``START_TIMEOUT_S`` (the message
                quotes its log).
        """
        if self.process is not None and self.process.poll() is None:
            return self
        self.directory = self._make_directory()
        self._initdb()
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "wal_level": "logical",
            "max_replication_slots": str(self.max_replication_slots),
            "max_wal_senders": str(self.max_replication_slots),
            # pg_xact_commit_timestamp(xid): the commit time Debezium sends as source.ts_ms,
            # which the row-time truth reads back from the database's own record
            "track_commit_timestamp": "on",
            # a throwaway cluster: no durability, little memory
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "max_connections": "40",
            "log_min_messages": self.log_level,
        }
        command = [str(self.bindir / "postgres"), "-D", str(self.directory / "data")]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                **self._run_as_owner(),
            )
        atexit.register(self.stop)  # a server never outlives a Python process that exits
        self._wait_until_ready()
        return self

    def _tail(self) -> str:
        if self.directory is None or not self.log_path.exists():
            return "(no log)"
        return f"{self.log_path}:\n" + self.log_path.read_text(errors="replace")[-3000:]

    def _wait_until_ready(self) -> None:
        psycopg = psycopg_driver()
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                tail = self._tail()
                self.stop()
                raise EnvironmentSetupError(
                    f"PostgreSQL exited with {self.process.returncode} before accepting "
                    f"connections on {self.host}:{self.port}; its log:\n{tail}"
                )
            try:
                with self.connect():
                    return
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                tail = self._tail()
                self.stop()
                raise EnvironmentSetupError(
                    f"PostgreSQL did not accept connections on {self.host}:{self.port} within "
                    f"{START_TIMEOUT_S:.0f} s; its log:\n{tail}"
                )
            time.sleep(0.1)

    def connect(self, dbname: str = "postgres") -> Any:
        """A ``psycopg.Connection`` (autocommit) to ``dbname`` as the superuser, through the
        unix socket."""
        return psycopg_driver().connect(
            host=str(self.socket_dir),
            port=self.port,
            user=SUPERUSER,
            dbname=dbname,
            autocommit=True,
            connect_timeout=5,
        )

    def execute(self, dbname: str, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run one statement (or several, without ``params``) in ``dbname``."""
        with self.connect(dbname) as conn:
            conn.execute(sql, params)

    def query(
        self, dbname: str, sql: str, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one query in ``dbname`` and return its rows."""
        with self.connect(dbname) as conn:
            return list(conn.execute(sql, params).fetchall())

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name``."""
        self.execute("postgres", f"CREATE DATABASE {_quote_ident(name)}")

    def create_replication_user(self, name: str, password: str) -> None:
        """A login role with ``REPLICATION`` and a password, as Debezium's PostgreSQL connector
        needs (a replication connection for the slot, a normal one for the snapshot). It gets
        no table privileges: grant ``SELECT`` on what it captures (:meth:`grant_capture`)."""
        self.execute(
            "postgres",
            f"CREATE ROLE {_quote_ident(name)} WITH LOGIN REPLICATION "
            f"PASSWORD {_quote_literal(password)}",
        )

    def grant_capture(self, dbname: str, user: str, tables: Sequence[str]) -> None:
        """Let ``user`` snapshot ``tables`` (``schema.table``) of ``dbname``: ``CONNECT`` on
        the database, ``USAGE`` on their schemas, ``SELECT`` on the tables."""
        who = _quote_ident(user)
        statements = [f"GRANT CONNECT ON DATABASE {_quote_ident(dbname)} TO {who}"]
        for table in tables:
            schema, _, name = table.rpartition(".")
            schema = schema or "public"
            statements += [
                f"GRANT USAGE ON SCHEMA {_quote_ident(schema)} TO {who}",
                f"GRANT SELECT ON {_quote_ident(schema)}.{_quote_ident(name)} TO {who}",
            ]
        with self.connect(dbname) as conn:
            for statement in statements:
                conn.execute(statement)

    def create_publication(self, dbname: str, name: str, tables: Sequence[str]) -> None:
        """``CREATE PUBLICATION name FOR TABLE ...`` in ``dbname``, by the superuser: the
        connector then needs no ownership of the tables (``publication.autocreate.mode =
        disabled``, ``publication.name = name``)."""
        listed = ", ".join(
            ".".join(_quote_ident(part) for part in table.split(".")) for table in tables
        )
        self.execute(dbname, f"CREATE PUBLICATION {_quote_ident(name)} FOR TABLE {listed}")

    def drop_replication_slot(self, name: str, *, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Drop the replication slot ``name`` if it exists (a slot holds WAL, and its database
        cannot be dropped while it exists); True if dropped.

        A consumer still attached (a connector that was just stopped, whose walsender has not
        exited yet) is ended first (``pg_terminate_backend``).

        Raises:
            EnvironmentSetupError: the slot is still in use after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        with self.connect() as conn:
            while True:
                row = conn.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,)
                ).fetchone()
                if row is None:
                    return False
                if row[0] is None:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                    return True
                conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                if time.monotonic() > deadline:
                    raise EnvironmentSetupError(
                        f"replication slot {name!r} is still in use by process {row[0]} after "
                        f"{timeout_s:.0f} s"
                    )
                time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server by its process id — SIGINT (fast shutdown: ends the sessions,
        writes a checkpoint), SIGKILL after ``STOP_TIMEOUT_S`` — and remove its directory."""
        atexit.unregister(self.stop)
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


@contextlib.contextmanager
def postgres_cluster(**kwargs: Any) -> Iterator[PostgresCluster]:
    """Run a :class:`PostgresCluster` for the ``with`` block; stop it (and remove its
    directory) at exit."""
    cluster = PostgresCluster(**kwargs)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
