#!/usr/bin/env bash
# Builds lakehouse's own JVM code with Maven (its pom fetches the compiler and the `provided`
# Spark and Jackson APIs from Maven Central) and puts the jar where the package finds it.
# Usage: scripts/build_jar.sh MODULE_DIR OUTPUT_JAR   (run by `make`)
set -uo pipefail
cd "$(dirname "$0")/.."
module=$1
out=$2
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: Maven (mvn) was not found; it builds lakehouse's JVM decoder ($module)." >&2
  echo "fix: install it (Debian/Ubuntu: 'apt-get install maven'; macOS: 'brew install maven') and run make again." >&2
  exit 1
fi
mkdir -p .jvm "$(dirname "$out")"
log=".jvm/$(basename "$module").build.log"
# -o first: a machine that already has the plugins and APIs in ~/.m2 needs no network
if ! mvn -B -q -o -Dstyle.color=never -f "$module/pom.xml" package >"$log" 2>&1 \
   && ! mvn -B -q -Dstyle.color=never -f "$module/pom.xml" package >"$log" 2>&1; then
  cause=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m1 -E "Could not (resolve|transfer)|COMPILATION ERROR|ERROR" | sed 's/^\[ERROR\] *//' | cut -c1-240)
  echo "error: Maven could not build $module: ${cause:-see $log}" >&2
  echo "fix: check that this machine reaches Maven Central (or a mirror set in ~/.m2/settings.xml) and that Java 17+ is first on PATH, then run make again; the full log is $log." >&2
  exit 1
fi
cp "$module/target/$(basename "$out")" "$out.tmp" && mv "$out.tmp" "$out"
echo "jvm: built $out"
