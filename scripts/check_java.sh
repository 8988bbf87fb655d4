#!/usr/bin/env bash
# Stops setup early, with the fix, when no usable Java is on the machine: PySpark 4 needs Java 17+.
set -euo pipefail
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java was not found (looked for '$java_bin'). PySpark 4 needs Java 17 or newer." >&2
  echo "fix: install it (Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless'; macOS: 'brew install openjdk@17')," >&2
  echo "     or set JAVA_HOME to an existing Java 17+ installation." >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(echo "$version_line" | sed -E 's/.*version "([0-9]+)(\.[0-9]+)*.*/\1/')
if [ "$major" = "1" ]; then major=$(echo "$version_line" | sed -E 's/.*version "1\.([0-9]+).*/\1/'); fi
if ! [[ "$major" =~ ^[0-9]+$ ]] || [ "$major" -lt 17 ]; then
  echo "error: Java 17 or newer is required by PySpark 4, found: $version_line" >&2
  echo "fix: install Java 17+ (Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless') and put it first on PATH or set JAVA_HOME." >&2
  exit 1
fi
