"""The wheel as users ship it, and the Databricks bundle's jobs run from it.

A packaging gap (a suite, a data file or an entry point missing from the wheel, a module that
only imports from the source tree, a job definition naming something the wheel lacks) fails
here instead of on a cluster: every task of the jobs in databricks.yml runs from the wheel in
a fresh virtual environment (tests/wheel_env.py), with the bundle's own arguments and
configuration files, against local tables and the test broker in place of the workspace's.
"""

from __future__ import annotations

import json
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from lakehouse import delta
from lakehouse.demo.data import make_demo_data
from lakehouse.sources.kafka_admin import create_topic, produce

pytestmark = [pytest.mark.slow, pytest.mark.broker]

ROOT = Path(__file__).resolve().parents[2]


def _bundle() -> tuple[dict[str, Any], dict[str, Any]]:
    """databricks.yml and the job resources it includes."""
    yaml = YAML(typ="safe")
    bundle = yaml.load((ROOT / "databricks.yml").read_text())
    jobs: dict[str, Any] = {}
    for pattern in bundle["include"]:
        for path in sorted(ROOT.glob(pattern)):
            jobs.update(yaml.load(path.read_text())["resources"]["jobs"])
    return bundle, jobs


def _variables(bundle: dict[str, Any], **local: str) -> dict[str, str]:
    defaults = {k: str(v.get("default", "")) for k, v in bundle["variables"].items()}
    return {**defaults, **local}


def _substitute(value: str, variables: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in variables, f"the bundle uses ${{var.{name}}}, which it does not declare"
        return variables[name]

    return re.sub(r"\$\{var\.([A-Za-z0-9_]+)\}", one, value)


def test_the_wheel_carries_everything_the_jobs_read_and_nothing_of_the_checkout(
    installed_wheel,
):
    names = zipfile.ZipFile(installed_wheel.wheel).namelist()
    suites = {Path(n).name for n in names if n.startswith("lakehouse/quality/suites/")}
    assert {p.name for p in (ROOT / "lakehouse/quality/suites").glob("*.json")} <= suites
    # the JVM decoder's jar (make builds it): a wheel without it decodes every record in Python
    for data in (
        "lakehouse/py.typed",
        "lakehouse/log4j2.properties",
        "lakehouse/_jars/lakehouse-decode.jar",
    ):
        assert data in names
    assets = ROOT / "lakehouse/quality/datadocs_assets"
    expected = {str(p.relative_to(ROOT)) for p in assets.rglob("*") if p.is_file()}
    assert expected and expected <= set(names), sorted(expected - set(names))
    assert not [n for n in names if n.split("/")[0] in ("tests", "pipelines", "bench", "soak")]
    assert "lakehouse = lakehouse.cli:main" in installed_wheel.entry_points()


def test_a_wheel_install_without_the_jars_says_where_they_come_from(installed_wheel, tmp_path):
    (tmp_path / "cdc").mkdir()
    (tmp_path / "c.toml").write_text(
        '[ingest]\npipeline_id = "p"\nsource = "files"\npath = "cdc"\ncheckpoint = "cp"\n'
        'dead_letter_table = "dl"\n[[ingest.tables]]\ntable = "t"\nkey = ["k"]\n'
    )
    done = installed_wheel.run(
        ["lakehouse", "ingest", "-c", "c.toml"], cwd=tmp_path, env={"LAKEHOUSE_JVM_DIR": ""}
    )
    # an empty LAKEHOUSE_JVM_DIR is no folder: the message names the setting to use
    assert done.returncode == 1, done.stderr[-2000:]
    assert "LAKEHOUSE_JVM_DIR" in done.stderr and "Traceback" not in done.stderr


#: The workspace's catalog, and the local one its tables are named in here: Spark's session
#: catalog, on a Hive metastore (three-level names work in both).
WORKSPACE_CATALOG, LOCAL_CATALOG = "main.lakehouse.", "spark_catalog.lakehouse."


def _local_names(text: str) -> str:
    return text.replace(WORKSPACE_CATALOG, LOCAL_CATALOG)


def _local_config(source: Path, out: Path, data_root: str, bootstrap: str) -> None:
    """The bundle's configuration file with the workspace's places replaced by local ones:
    the volume and the external location by folders, the catalog by a Hive metastore
    (embedded Derby), the brokers by the test broker (no SASL), Spark local."""
    text = _local_names(source.read_text().replace("/Volumes/main/lakehouse/data", data_root))
    settings = tomllib.loads(text)
    text = re.sub(r"(?m)^options = .*\n", "", text)
    text = text.replace(settings["kafka"]["bootstrap_servers"], bootstrap)
    metastore = f"jdbc:derby:;databaseName={data_root}/metastore_db;create=true"
    spark = (
        '[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = "2"\n'
        '"spark.sql.catalogImplementation" = "hive"\n'
        f'"spark.hadoop.javax.jdo.option.ConnectionURL" = "{metastore}"\n'
        f'"spark.sql.warehouse.dir" = "{data_root}/warehouse"\n'
        f'"spark.lakehouse.tables.location" = "{data_root}/tables"\n\n'
    )
    out.write_text(spark + text)


@pytest.mark.extended  # eight Spark processes from a wheel install (about ten minutes)
@pytest.mark.timeout(1800)  # eight Spark processes, one after another, and the wheel's build
def test_every_task_of_the_bundle_runs_from_the_wheel(installed_wheel, kafka_broker, tmp_path):
    bundle, jobs = _bundle()
    assert set(jobs) == {
        "lakehouse_ingest",
        "lakehouse_joins",
        "lakehouse_quality",
        "lakehouse_maintenance",
    }
    distribution = installed_wheel.wheel.name.split("-")[0]
    console_scripts = installed_wheel.entry_points()

    # the bundle's configuration files, pointed at local tables and the test broker
    data_root = str(tmp_path / "data")
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    for source in sorted((ROOT / "databricks").glob("*.toml")):
        _local_config(source, config_dir / source.name, data_root, kafka_broker)
    variables = _variables(bundle, config_dir=str(config_dir), data_root=data_root)
    assert bundle["variables"]["data_root"]["default"] == "/Volumes/main/lakehouse/data"

    # Debezium's topics and the orders: the demo's data, with the topics the ingest names
    ingest = tomllib.loads((config_dir / "lakehouse.toml").read_text())["ingest"]
    (cdc_topic,) = ingest["topics"]
    demo = make_demo_data(orders=240, changes=30)
    create_topic(kafka_broker, cdc_topic, demo.cdc_partitions)
    create_topic(kafka_broker, "orders", demo.order_partitions)
    for table in ingest["tables"]:
        for topic in (table["notification_topic"], table["heartbeat_topic"]):
            create_topic(kafka_broker, topic, 1)
    produce(kafka_broker, cdc_topic, [r for w in demo.waves for r in w.cdc])
    produce(kafka_broker, "orders", [r for w in demo.waves for r in w.orders])
    # the schema of the tables is the workspace admin's to create (CREATE SCHEMA main.lakehouse)
    schema = installed_wheel.run(
        [
            "python",
            "-c",
            "import lakehouse\n"
            f"settings = lakehouse.load_settings({str(config_dir / 'lakehouse.toml')!r})\n"
            "spark = lakehouse.get_spark(master='local[1]', conf=settings.spark.conf)\n"
            f"spark.sql('CREATE SCHEMA {LOCAL_CATALOG.rstrip('.')}')\n",
        ],
        cwd=tmp_path,
    )
    assert schema.returncode == 0, schema.stderr[-3000:]

    order = [
        ("lakehouse_ingest", "ingest"),
        ("lakehouse_joins", "join_rowtime"),
        ("lakehouse_joins", "join_proctime"),
        ("lakehouse_quality", "quality_rowtime"),
        ("lakehouse_quality", "quality_proctime"),
        ("lakehouse_maintenance", "compact"),
        ("lakehouse_maintenance", "vacuum"),
    ]
    tasks = {(job, t["task_key"]): t for job, spec in jobs.items() for t in spec["tasks"]}
    assert set(tasks) == set(order), "a task of the bundle is not run here"
    for job, key in order:
        task = tasks[(job, key)]
        wheel_task = task["python_wheel_task"]
        assert wheel_task["package_name"] == distribution
        assert f"{wheel_task['entry_point']} = " in console_scripts
        assert [lib["whl"] for lib in task["libraries"]] == ["../dist/*.whl"]
        args = [_local_names(_substitute(a, variables)) for a in wheel_task["parameters"]]
        if "continuous" in jobs[job]:
            args += ["--trigger", "available-now"]  # the one change: a run that ends
        done = installed_wheel.run([wheel_task["entry_point"], *args], cwd=tmp_path)
        assert done.returncode == 0, f"{job}.{key} {args}: {done.stderr[-3000:]}"
        # the wheel's own decoder was on the classpath (else the ingest says so, once)
        assert "JVM decoder" not in done.stderr, f"{job}.{key}: {done.stderr[-3000:]}"

    # what the jobs made: the build table complete, both joins' output, the reports; each
    # table at <tables_location>/<schema>/<table>, under its name in the metastore (compact and
    # vacuum found the build table by it)
    tables = Path(data_root) / "tables" / "lakehouse"
    assert delta.get_properties(str(tables / "rates"))["lakehouse.snapshot.complete"] == "true"
    for mode in ("rowtime", "proctime"):
        summary = json.loads((Path(data_root) / f"quality/orders_{mode}/summary.json").read_text())
        assert summary["success"], summary
        assert delta.row_count(str(tables / f"orders_{mode}")) > 0
    # every order the processing-time join holds was released after the marker
    assert delta.row_count(str(tables / "orders_proctime")) == 240


def test_a_pipelines_script_runs_against_the_installed_wheel(installed_wheel, tmp_path):
    # the scripts are for spark-submit and Python-file tasks: they import the installed package
    done = installed_wheel.run(
        ["python", str(ROOT / "pipelines" / "quality_report.py"), "--help"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Great Expectations" in done.stdout
