#!/usr/bin/env bash
# Install everything the tests need (pip and Debian packages) and run them.
# Used as-is by .ci/run on a fresh machine; safe to re-run (skips what is already installed).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
echo "== pip: fmstack with test extras (torch pinned to the CPU build 2.13.0)"
# The S3 stack is pinned as one known-good set: unpinned, pip backtracks through every aiobotocore / boto3
# release for many minutes (moto needs boto3, s3fs needs aiobotocore's narrow botocore range).
S3_STACK=('moto[server]==5.2.1' 's3fs==2026.9.0' 'aiobotocore==3.10.0' 'boto3==1.43.11' 'botocore==1.43.117'
          'kubernetes==37.0.1')  # kubernetes 37.0.2 wants a python-dateutil that botocore refuses
pip_log=$(mktemp)
if ! $PY -m pip install -q --disable-pip-version-check -e '.[test,observe,k8s,s3,torch]' "${S3_STACK[@]}" >"$pip_log" 2>&1; then
  grep -v -e "^WARNING: Location" "$pip_log" >&2
  echo "pip install failed" >&2
  exit 1
fi
rm -f "$pip_log"

need_apt=()
command -v promtool >/dev/null || need_apt+=(prometheus prometheus-alertmanager)
command -v slurmctld >/dev/null || need_apt+=(slurmctld slurmd slurm-client munge)
command -v chromium >/dev/null || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "== apt: ${need_apt[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "== not root: cannot install ${need_apt[*]}; tests that need them will be skipped" >&2
  fi
fi

echo "== lint and types"
$PY -m ruff check src tests benchmarks
$PY -m ruff format --check src tests benchmarks
$PY -m mypy

echo "== tests"
$PY -m pytest -q -p no:cacheprovider "$@"
