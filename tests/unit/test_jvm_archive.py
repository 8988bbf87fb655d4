"""The tests' class-data archive is keyed by everything it depends on (lakehouse.testing)."""

from __future__ import annotations

import os

import jvm_archive
import pytest


@pytest.fixture
def jars(tmp_path, monkeypatch):
    """Spark's classpath replaced by two jars in ``tmp_path`` (nothing is started)."""
    home = [tmp_path / "spark-core.jar", tmp_path / "delta-spark.jar"]
    for jar in home:
        jar.write_bytes(b"PK")
    monkeypatch.setattr("lakehouse.spark.spark_home_jars", lambda: [str(j) for j in home])
    monkeypatch.setattr("lakehouse.spark.spark_jar_folder", lambda: tmp_path / "none")
    monkeypatch.setattr("lakehouse.spark.jvm_dir", lambda: tmp_path / "jvm")
    return home


def test_the_key_changes_with_a_jar_and_with_the_options_and_not_otherwise(jars):
    key = jvm_archive.spark_archive_key(["-XX:+UseSerialGC"])
    assert jvm_archive.spark_archive_key(["-XX:+UseSerialGC"]) == key
    assert jvm_archive.spark_archive_key(["-XX:+UseG1GC"]) != key
    jars[1].write_bytes(b"PK, another build")
    os.utime(jars[1], ns=(1, 1))
    assert jvm_archive.spark_archive_key(["-XX:+UseSerialGC"]) != key


def test_a_missing_archive_is_not_built_unless_asked(jars):
    assert jvm_archive.spark_archive(["-XX:+UseSerialGC"], build=False) is None
    key = jvm_archive.spark_archive_key(["-XX:+UseSerialGC"])
    archive = jars[0].parent / "jvm" / "cds" / f"spark-{key}.jsa"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    assert jvm_archive.spark_archive(["-XX:+UseSerialGC"], build=False) == archive
    assert jvm_archive.archive_options(archive)[0] == f"-XX:SharedArchiveFile={archive}"
