#!/usr/bin/env bash
# Copies the pinned JVM artifacts (jvm/<name>/pom.xml) into .jvm/<name>/ with Maven: delta-spark
# and Spark's Kafka source for Spark, an Apache Kafka broker for the tests and the demo, a Kafka
# Connect worker with Debezium's PostgreSQL connector for the Debezium tests.
# Usage: scripts/fetch_jvm.sh NAME...   (run by `make`; safe to run again)
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) was not found; it fetches delta-spark, Spark's Kafka source, the Kafka broker and Kafka Connect with Debezium from Maven Central." >&2
  echo "fix: install it (Debian/Ubuntu: 'apt-get install maven'; macOS: 'brew install maven') and run make again." >&2
  exit 1
fi
for name in "$@"; do
  pom="jvm/$name/pom.xml"
  out=".jvm/$name"
  log=".jvm/$name.log"
  mkdir -p .jvm
  rm -rf "$out.tmp"
  # -o first: a machine that already has the artifacts in ~/.m2 needs no network
  if ! mvn -B -q -o -Dstyle.color=never -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DoutputDirectory="$PWD/$out.tmp" >"$log" 2>&1 \
     && ! mvn -B -q -Dstyle.color=never -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DoutputDirectory="$PWD/$out.tmp" >"$log" 2>&1; then
    cause=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 -E "Could not (resolve|transfer)|UnknownHost|Connection|ERROR" | sed 's/^\[ERROR\] *//' | cut -c1-240)
    echo "error: Maven could not fetch the JVM artifacts of $pom: ${cause:-see $log}" >&2
    echo "fix: check that this machine reaches Maven Central (https://repo.maven.apache.org) or a mirror set in ~/.m2/settings.xml, then run make again; the full log is $log." >&2
    rm -rf "$out.tmp"
    exit 1
  fi
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "jvm: $(ls "$out" | wc -l) jars in $out"
done
