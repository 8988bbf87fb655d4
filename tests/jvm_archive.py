"""A class-data archive (AppCDS) for the Spark JVMs the tests start.

The suite is CPU-bound on two cores, and much of it is JVM start-up: every ``lakehouse``
command a test runs, every job a crash test kills and restarts, starts a Spark driver that
loads some 15,000 classes, each read from a jar, parsed and verified. A dynamic class-data
archive (JEP 350, ``-XX:ArchiveClassesAtExit``) holds them ready to map, so a command starts
with less CPU.

:func:`spark_archive` builds the archive once, by running ``lakehouse smoke`` (Spark starts,
writes a Delta table and reads it back: the start-up classes every driver loads) in a JVM that
writes it when it exits. An archive written from a longer run (the whole Kafka demo) takes
longer to write and saves no more. It is kept under ``<jvm dir>/cds`` by a key of everything it
depends on: the JDK, the jars on Spark's classpath (its own, and the Delta, Kafka and S3A jars
lakehouse adds: their names, sizes and times) and the JVM options. A changed jar or JDK gives a
new key, hence a new archive; a JVM given an archive that does not match its classpath (a wheel
installed elsewhere) ignores it, silently (``-Xlog:cds=off``). Nothing of this changes what a
JVM computes, only how fast it loads its classes. Users' jobs never see it: only the tests'
``LAKEHOUSE_SPARK_CONF`` (tests/conftest.py) names the archive.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

#: Keeps a JVM quiet when the archive does not match its classpath (by default it prints a
#: warning on standard output, where a command's output belongs).
QUIET: tuple[str, ...] = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
BUILD_TIMEOUT_S = 600.0


def archive_options(archive: Path) -> tuple[str, ...]:
    """The JVM options that map ``archive`` (ignored, silently, where it does not fit)."""
    return (f"-XX:SharedArchiveFile={archive}", *QUIET)


def spark_archive_key(jvm_options: Sequence[str]) -> str:
    """What the archive of a Spark JVM started with ``jvm_options`` depends on, hashed."""
    from lakehouse.spark import (
        java_version_text,
        s3a_jar_folder,
        spark_home_jars,
        spark_jar_folder,
    )

    digest = hashlib.sha256()
    digest.update(java_version_text().encode())
    digest.update(" ".join(jvm_options).encode())
    added = [j for f in (spark_jar_folder(), s3a_jar_folder()) for j in glob.glob(f"{f}/*.jar")]
    for jar in [*spark_home_jars(), *sorted(added)]:
        st = os.stat(jar)
        digest.update(f"{jar}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def spark_archive(jvm_options: Sequence[str], *, build: bool = True) -> Path | None:
    """The archive for Spark JVMs started with ``jvm_options``, built first when missing and
    ``build``; None when it is missing and not built. Safe to call from several processes at
    once: one builds, the others wait for it (a file lock)."""
    from lakehouse.spark import jvm_dir

    folder = jvm_dir() / "cds"
    path = folder / f"spark-{spark_archive_key(jvm_options)}.jsa"
    if path.exists():
        return path
    if not build:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock"):
        if not path.exists():
            _build(path, jvm_options)
    return path


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(path: Path, jvm_options: Sequence[str]) -> None:
    """Run ``lakehouse smoke`` in a JVM that writes the archive at its exit, wait until it has,
    then move the archive into place (a JVM never maps a half-written one)."""
    partial = path.with_suffix(f".{os.getpid()}.partial")
    dump = f"-XX:ArchiveClassesAtExit={partial}"
    options = " ".join([*jvm_options, dump, *QUIET])
    env = {**os.environ, "LAKEHOUSE_SPARK_CONF": f"spark.driver.defaultJavaOptions={options}"}
    started = time.monotonic()
    print(f"tests: writing the Spark class-data archive {path.name} ...", flush=True)
    lakehouse = Path(sys.executable).parent / "lakehouse"
    with tempfile.TemporaryDirectory(prefix="lakehouse-cds-") as work:
        command = [str(lakehouse), "smoke", "--directory", f"{work}/smoke"]
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        # The command ends before its JVM: the JVM exits when its standard input closes, and
        # writes the archive then.
        _wait_for_exit(dump, deadline=time.monotonic() + BUILD_TIMEOUT_S)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"the class-data archive run failed (exit {done.returncode}):\n{tail}")
    os.replace(partial, path)
    print(
        f"tests: class-data archive written in {time.monotonic() - started:.0f} s",
        flush=True,
    )


def _wait_for_exit(argument: str, *, deadline: float) -> None:
    """Wait until no process has ``argument`` on its command line."""
    while time.monotonic() < deadline:
        if not any(argument in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()):
            return
        time.sleep(0.5)
    raise RuntimeError(f"a JVM with {argument} did not exit")


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def main(argv: Sequence[str]) -> int:
    """``ensure``: build the tests' archive unless it exists (``make test`` runs this first)."""
    from lakehouse.testing.broker import TEST_JVM_OPTIONS

    if list(argv) != ["ensure"]:
        print("usage: python -m tests.jvm_archive ensure", file=sys.stderr)
        return 2
    try:
        archive = spark_archive(TEST_JVM_OPTIONS)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        # the archive only saves time: the tests run without it (and find what broke the smoke run)
        print(f"warning: no class-data archive, the tests load classes from jars: {e}")
        return 0
    print(f"tests: Spark class-data archive {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
