"""Which sessions lakehouse starts on its own local file systems (``local_files_conf``)."""

from __future__ import annotations

import os

import pytest

from lakehouse import spark as spark_module
from lakehouse.spark import LOCAL_FILES_CONF, local_files_conf

JAR = "/opt/lakehouse/lakehouse-decode.jar"


@pytest.fixture(autouse=True)
def _jar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_module, "own_jars", lambda: [JAR])


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]"])
def test_a_local_master_gets_the_file_systems_and_the_jar_on_the_drivers_classpath(master):
    conf = local_files_conf(master, {})
    assert {k: conf[k] for k in LOCAL_FILES_CONF} == LOCAL_FILES_CONF
    assert conf["spark.driver.extraClassPath"] == JAR


def test_the_jar_goes_before_the_classpath_the_user_gave():
    conf = local_files_conf("local[2]", {"spark.driver.extraClassPath": "/a.jar:/b.jar"})
    assert conf["spark.driver.extraClassPath"] == os.pathsep.join([JAR, "/a.jar", "/b.jar"])


@pytest.mark.parametrize(
    "master", ["spark://127.0.0.1:7077", "local-cluster[2,1,1024]", "yarn", "k8s://h:443"]
)
def test_a_master_whose_tasks_run_in_other_jvms_keeps_hadoops_file_systems(master):
    assert local_files_conf(master, {}) == {}


@pytest.mark.parametrize("key", sorted(LOCAL_FILES_CONF))
def test_a_file_system_the_user_names_wins(key):
    assert local_files_conf("local[2]", {key: "org.apache.hadoop.fs.LocalFileSystem"}) == {}


def test_an_installation_without_the_jar_keeps_hadoops(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(spark_module, "own_jars", lambda: [])
    assert local_files_conf("local[2]", {}) == {}
