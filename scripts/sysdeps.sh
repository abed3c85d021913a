#!/usr/bin/env bash
# Install the system packages LakeSync needs when they are missing (Debian/Ubuntu).
# Java 17 runs local Spark; jarjar and the sqlite JDBC driver set up the Iceberg runtime
# (see src/lakesync/spark/runtime.py, which looks for exactly these jar files).
# PostgreSQL and MariaDB servers: the SQL destination tests (tests/sql) start throwaway instances of them.
set -euo pipefail

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
# Library packages install jars, not commands: check the files themselves.
[ -f /usr/share/java/jarjar.jar ] || missing+=(libjarjar-java)
# The driver loads its native part from libxerial-sqlite-jdbc-jni, a dependency of this package.
[ -f /usr/share/java/sqlite-jdbc.jar ] || missing+=(libxerial-sqlite-jdbc-java)
# Server binaries live outside PATH (/usr/lib/postgresql/<v>/bin, /usr/sbin): check the files.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
{ [ -x /usr/sbin/mariadbd ] && [ -x /usr/bin/mariadb-install-db ]; } || missing+=(mariadb-server)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "installing system packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
