# Two commands matter: `make demo` and `make test`. Both create .venv on first use and
# install the pinned set (constraints.txt) into it, so every machine runs the same versions.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The oldest Spark line lakehouse supports (Databricks Runtime 17): a second environment with
# the same pins except these, for the join and source tests (pyproject.toml, [spark] extra)
VENV40 := .venv-spark40
SPARK40_PINS := pyspark==4.0.0 delta-spark==4.0.0
STAMP40 := $(VENV40)/.installed
# JVM artifacts (delta-spark, Spark's Kafka source, a Kafka broker, Kafka Connect with Debezium's
# PostgreSQL connector, Hadoop's S3A connector), from the pinned poms in jvm/; spark-4.0: the
# same for Spark 4.0
JVM_STAMP := .jvm/.installed
# lakehouse's own JVM code (jvm/decode: the Debezium decode's Java UDF), built with Maven into
# the package, where the wheel carries it and lakehouse.spark finds it
DECODE_JAR := lakehouse/_jars/lakehouse-decode.jar
DECODE_SOURCES := jvm/decode/pom.xml $(shell find jvm/decode/src -type f 2>/dev/null)
# The tests that run again on Spark 4.0: the join (both paths), the sources, the Python API and
# the direct Delta write (delta-spark 4.0 has other constructors)
TESTS40 := tests/integration/test_join.py tests/integration/test_join_paths.py \
	tests/integration/test_sources_files.py tests/integration/test_sources_kafka.py \
	tests/integration/test_jvm_decode.py tests/integration/test_api.py \
	tests/integration/test_delta.py::test_a_direct_write_commits_what_delta_s_writer_commits \
	tests/integration/test_delta.py::test_a_staged_append_commits_what_append_commits \
	tests/integration/test_delta.py::test_a_staged_creation_commits_the_table_its_properties_and_rows_at_once \
	tests/integration/test_delta.py::test_a_due_checkpoint_is_written_beside_the_next_batch_not_inside_the_commit
# the whole-ingest comparison of the two decode paths and the comparisons over generated records
# run once (on the newest Spark): the decoder's Java and the sink's Python are the same on both
# lines, and on 4.0 the comparison over every fixture proves the Spark API they use
TESTS40_DESELECT := \
	--deselect tests/integration/test_jvm_decode.py::test_an_ingest_writes_the_same_tables_whichever_path_decodes \
	--deselect tests/integration/test_jvm_decode.py::test_generated_envelopes_decode_the_same_in_the_jvm_and_in_python \
	--deselect tests/integration/test_jvm_decode.py::test_generated_records_without_schemas_decode_the_same_in_the_jvm_and_in_python

# The suite runs in two pytest-xdist workers (worksteal: a worker that is done takes tests
# queued on the other). It is CPU-bound on two cores: one process waits on subprocesses and
# servers while the other computes. XDIST="-n 0" runs it in one process.
XDIST ?= -n 2 --dist worksteal

.PHONY: demo test test-extended check docs lint bench soak smoke jvm wheel clean-venv

$(STAMP): pyproject.toml constraints.txt scripts/check_java.sh
	@scripts/check_java.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python 3.11+ is required, found " + sys.version.split()[0] + ". fix: run make with PYTHON=/path/to/python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[spark,dev]'
	@touch $(STAMP)

$(STAMP40): pyproject.toml constraints.txt Makefile
	@test -x $(VENV40)/bin/python || $(PYTHON) -m venv $(VENV40)
	$(VENV40)/bin/python -m pip install --quiet --upgrade pip
	@grep -vE '^(pyspark|delta-spark)==' constraints.txt > $(VENV40)/constraints.txt
	@printf '%s\n' $(SPARK40_PINS) >> $(VENV40)/constraints.txt
	$(VENV40)/bin/python -m pip install --quiet -c $(VENV40)/constraints.txt -e '.[spark,dev]'
	@touch $(STAMP40)

$(JVM_STAMP): jvm/spark/pom.xml jvm/spark-4.0/pom.xml jvm/kafka/pom.xml jvm/connect/pom.xml jvm/s3/pom.xml scripts/fetch_jvm.sh
	@scripts/check_java.sh
	@scripts/fetch_jvm.sh spark spark-4.0 kafka connect s3
	@touch $(JVM_STAMP)

$(DECODE_JAR): $(DECODE_SOURCES) scripts/build_jar.sh
	@scripts/check_java.sh
	@scripts/build_jar.sh jvm/decode $(DECODE_JAR)

jvm: $(JVM_STAMP) $(DECODE_JAR)

# The wheel a cluster or Databricks installs (dist/): the package with its own jar in it
wheel: $(DECODE_JAR)
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir dist .

demo: $(STAMP) $(JVM_STAMP) $(DECODE_JAR)
	$(VENV)/bin/lakehouse demo $(ARGS)

test: $(STAMP) $(STAMP40) $(JVM_STAMP) $(DECODE_JAR) lint docs
	$(PY) -m tests.jvm_archive ensure
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)
	$(VENV40)/bin/python -m pytest -p no:cacheprovider $(XDIST) $(TESTS40) $(TESTS40_DESELECT)

# The extended tier (tests marked `extended`, which `make test` leaves out to stay within its
# budget): the crash matrix's long chains, the Databricks bundle's tasks from the wheel, the
# standalone cluster with a worker killed, the demo on a real database. About 50 minutes.
test-extended: $(STAMP) $(JVM_STAMP) $(DECODE_JAR)
	$(PY) -m tests.jvm_archive ensure
	$(PY) -m pytest $(XDIST) -m extended $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check lakehouse pipelines tests bench soak docs/hooks
	$(PY) -m ruff format --check lakehouse pipelines tests bench soak docs/hooks
	$(PY) -m mypy

# The fast loop (no Spark, no servers, no JVM artifacts): lint and types, the docs site, the unit tests
# (tests/unit is Spark-free; tests/conftest.py refuses a unit test that asks for Spark) and the
# library's doctests
check: $(STAMP) lint docs
	$(PY) -m pytest $(XDIST) -p no:cacheprovider tests/unit lakehouse

# The documentation site (mkdocs.yml, docs/), into site/; --strict: a broken link, anchor or
# page fails. The CLI and settings references are generated from the code (docs/hooks/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

bench: $(STAMP) $(JVM_STAMP) $(DECODE_JAR)
	$(PY) -m bench.run $(ARGS)

# Not part of `make test`: 20 minutes of input with SIGKILLs (soak/run.py); ARGS="--minutes 4"
soak: $(STAMP) $(JVM_STAMP) $(DECODE_JAR)
	$(PY) -m soak.run $(ARGS)

smoke: $(STAMP) $(JVM_STAMP) $(DECODE_JAR)
	$(VENV)/bin/lakehouse smoke

clean-venv:
	rm -rf $(VENV) $(VENV40) .jvm $(DECODE_JAR) jvm/decode/target
