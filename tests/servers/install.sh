#!/usr/bin/env bash
# The Debian package the PostgreSQL-backed Prefect server tests (tests/servers) need: PostgreSQL. Idempotent and
# quiet, like tests/slurm/install.sh; needs root. The tests start a private cluster of their own
# (tests/servers/harness.py); nothing here starts or configures the system's.
set -euo pipefail

dpkg-query -W -f='${Status}' postgresql 2>/dev/null | grep -q "install ok installed" && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tests/servers/install.sh: installing postgresql needs root (the PostgreSQL tests skip without it)" >&2
    exit 1
fi
start=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "tests/servers/install.sh: apt-get install postgresql failed (log above)" >&2
    exit 1
fi
rm -f "$log"
echo "tests/servers/install.sh: installed postgresql in $(( $(date +%s) - start )) s"
