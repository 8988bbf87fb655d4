# Two commands matter: `make demo` and `make test`. Both create .venv on first use and
# install the pinned set (constraints.txt) into it, so every machine runs the same versions.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# JVM artifacts (delta-spark, Spark's Kafka source, a Kafka broker, Kafka Connect with Debezium's
# PostgreSQL connector), from the pinned poms in jvm/
JVM_STAMP := .jvm/.installed

.PHONY: demo test lint bench soak smoke jvm clean-venv

$(STAMP): pyproject.toml constraints.txt scripts/check_java.sh
	@scripts/check_java.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python 3.11+ is required, found " + sys.version.split()[0] + ". fix: run make with PYTHON=/path/to/python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

$(JVM_STAMP): jvm/spark/pom.xml jvm/kafka/pom.xml jvm/connect/pom.xml scripts/fetch_jvm.sh
	@scripts/check_java.sh
	@scripts/fetch_jvm.sh spark kafka connect
	@touch $(JVM_STAMP)

jvm: $(JVM_STAMP)

demo: $(STAMP) $(JVM_STAMP)
	$(VENV)/bin/lakehouse demo $(ARGS)

test: $(STAMP) $(JVM_STAMP)
	$(PY) -m ruff check lakehouse pipelines tests bench soak
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check lakehouse pipelines tests bench soak
	$(PY) -m ruff format --check lakehouse pipelines tests bench soak

bench: $(STAMP) $(JVM_STAMP)
	$(PY) -m bench.run $(ARGS)

# Not part of `make test`: 20 minutes of input with SIGKILLs (soak/run.py); ARGS="--minutes 4"
soak: $(STAMP) $(JVM_STAMP)
	$(PY) -m soak.run $(ARGS)

smoke: $(STAMP) $(JVM_STAMP)
	$(VENV)/bin/lakehouse smoke

clean-venv:
	rm -rf $(VENV) .jvm
