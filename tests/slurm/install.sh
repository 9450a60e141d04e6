#!/usr/bin/env bash
# The Debian packages the real-Slurm tests (tests/slurm) need: Slurm 22.05 (slurmctld, slurmd, clients),
# munge, and for `sacct` slurmdbd + MariaDB. Idempotent (installs only what is missing; nothing when all is
# there) and quiet (prints one line when it installs). Needs root; .ci/run calls it before `make test`.
# The tests start their own private daemons (tests/slurm/cluster.py); nothing here starts or configures a
# system Slurm, and the package scripts cannot start services on a machine without systemd.
set -euo pipefail

packages=(slurm-wlm munge slurmdbd mariadb-server mariadb-client)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/slurm/install.sh: installing ${missing[*]} needs root (the real-Slurm tests skip without them)" >&2
    exit 1
fi
start=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "tests/slurm/install.sh: apt-get install ${missing[*]} failed (log above)" >&2
    exit 1
fi
rm -f "$log"
echo "tests/slurm/install.sh: installed ${missing[*]} in $(( $(date +%s) - start )) s"
