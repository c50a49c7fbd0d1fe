#!/usr/bin/env bash
# Run the manowar-memory test suite against real servers.
#
#   bash scripts/test.sh                  whole suite: pytest in parallel, ruff and mypy beside it
#   bash scripts/test.sh --fast           the developer loop: no slow, cluster or Temporal tests, no static checks
#   bash scripts/test.sh tests/x.py -k y  any pytest arguments (run as given, serially unless you pass -n)
#
# 1. Installs every third-party dependency (CPU torch 2.13.0, the [all,dev] extras, the
#    integrations' requirements, from scripts/requirements.py) into one virtual environment
#    outside the checkout, $MANOWAR_VENV (default ~/.cache/manowar-memory/venv), shared by every
#    clone: pip runs only when that list (or the torch pin) changed. The code under test is this
#    checkout's, put first on PYTHONPATH, so two clones never see each other's code.
# 2. Installs Debian's chromium when missing (the docs browser check), then starts MongoDB,
#    Redis and the Temporal dev server (scripts/services.sh start; $MANOWAR_TEST_SERVICES, default
#    "redis mongo temporal", names fewer). When the script exits, however it exits (done, failed,
#    Ctrl-C, SIGTERM), it stops the servers it started itself and only those: a server that
#    already answered on its port before the run is reused and left running.
# 3. Runs pytest with the servers required (MANOWAR_REQUIRE_SERVICES=1) and no model downloads.
#    A whole run spreads the tests over $MANOWAR_TEST_WORKERS pytest-xdist workers (default 3:
#    most tests wait on a server or a subprocess, so a third worker keeps two cores busy),
#    with `--dist loadgroup` keeping each xdist_group (cluster, Temporal workers) on one worker,
#    and runs ruff and mypy (cache under ~/.cache/manowar-memory) at the same time.
# Exits non-zero when pytest or a static check fails; "no tests collected" (5) counts as a failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
CACHE="${MANOWAR_CACHE:-$HOME/.cache/manowar-memory}"
VENV="${MANOWAR_VENV:-$CACHE/venv}"
PY="${PYTHON:-python3}"
TORCH="torch==2.13.0"   # CPU wheel from pip's find-links; never let pip pick another torch
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[test %s] %s\n' "$(date +%T)" "$*" >&2; }

# ---------------------------------------------------------------- cleanup

# Whatever the way out, stop the pytest run still going, the servers this run started, and remove
# its temporary files. services.sh lists the services it launched in $started_file.
work_dir=$(mktemp -d)
started_file="$work_dir/started-services"
pytest_pid=""
static_pids=()
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in $pytest_pid "${static_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if [[ -s "$started_file" ]]; then
    # shellcheck disable=SC2046 # one service name a line
    bash "$SERVICES_SH" stop $(sort -u "$started_file") || log "could not stop every server this run started"
  fi
  rm -rf "$work_dir"
  exit "$rc"
}
SERVICES_SH="$REPO/scripts/services.sh"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- install

mkdir -p "$CACHE"
[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }

requirements="$CACHE/requirements.txt"
# The list is written in this run's own directory: runs started together (two clones, or the
# tests that run this script) must not read or remove each other's.
wanted="$work_dir/requirements.txt"
"$PY" scripts/requirements.py all dev >"$wanted"
stamp_file="$VENV/.manowar-install-stamp"
stamp=$({ echo "$TORCH"; cat "$wanted"; } | sha256sum | cut -d' ' -f1)

if [[ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]]; then
  # One install at a time into the shared environment (two clones may start together).
  exec 9>"$CACHE/install.lock"
  flock 9
  if [[ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]]; then
    cp "$wanted" "$requirements"
    echo "$TORCH" >"$CACHE/constraints.txt"
    log "pip: installing $TORCH"
    "$VENV/bin/python" -m pip install -q "$TORCH"
    log "pip: installing $(wc -l <"$requirements") requirements into $VENV"
    "$VENV/bin/python" -m pip install -q -c "$CACHE/constraints.txt" -r "$requirements"
    echo "$stamp" >"$stamp_file"
  fi  # else another run installed the same list while this one waited
  flock -u 9
else
  log "dependencies up to date in $VENV (delete $stamp_file to force a reinstall)"
fi
export PYTHONPATH="$REPO:$REPO/integrations/langchain_manowar:$REPO/integrations/llama_index_manowar${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$VENV/bin:$PATH"

# ---------------------------------------------------------------- browser

# Debian's headless Chromium, for the docs site's browser check (tests/test_docs.py).
if ! command -v chromium >/dev/null 2>&1; then
  [[ $EUID -eq 0 ]] || { log "FAIL: chromium is missing and installing it needs root (apt-get install chromium)"; exit 1; }
  log "apt: installing chromium"
  [[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# ---------------------------------------------------------------- servers

# shellcheck disable=SC2086 # a list of service names
MANOWAR_SERVICES_STARTED="$started_file" bash "$SERVICES_SH" start ${MANOWAR_TEST_SERVICES:-redis mongo temporal}
ENV_FILE="${MANOWAR_SERVICES_ROOT:-$HOME/.cache/manowar-services}/services.env"
set -a
# shellcheck disable=SC1090
source "$ENV_FILE"
set +a
export MANOWAR_REQUIRE_SERVICES=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Bytecode caches on: with PYTHONDONTWRITEBYTECODE set (some images set it), every pytest worker
# recompiles the test modules and the assertion-rewritten plugin packages (hypothesis, langsmith,
# schemathesis, ...) on each run; collecting the suite took 96-115 s instead of 42-44 s.
unset PYTHONDONTWRITEBYTECODE

# ---------------------------------------------------------------- tests

static_logs=()
if [[ $# -eq 0 ]]; then
  # The whole suite: static checks beside pytest, pytest on several workers.
  static_dir="$work_dir/static"
  mkdir -p "$static_dir"
  "$VENV/bin/python" -m ruff check --no-cache --output-format concise . >"$static_dir/ruff.log" 2>&1 &
  static_pids+=($!); static_logs+=("$static_dir/ruff.log")
  nice -n 5 "$VENV/bin/python" -m mypy --cache-dir "$CACHE/mypy" >"$static_dir/mypy.log" 2>&1 &
  static_pids+=($!); static_logs+=("$static_dir/mypy.log")
  set -- -q -n "${MANOWAR_TEST_WORKERS:-3}" --dist loadgroup --durations=15
elif [[ "$1" == "--fast" ]]; then
  shift
  set -- -q -n "${MANOWAR_TEST_WORKERS:-3}" --dist loadgroup -m "not slow and not cluster and not temporal" "$@"
fi

# In the background and waited for, so a SIGTERM to this script runs its trap at once (bash runs
# a trap only after the foreground command ends) and the trap stops pytest.
set +e
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@" &
pytest_pid=$!
wait "$pytest_pid"
rc=$?
pytest_pid=""
set -e
if [[ $rc -eq 5 ]]; then
  log "FAIL: pytest collected no tests (exit code 5)"
  rc=1
fi

for i in "${!static_pids[@]}"; do
  name=$(basename "${static_logs[$i]}" .log)
  if wait "${static_pids[$i]}"; then
    log "$name: clean"
  else
    log "FAIL: $name found problems:"
    cat "${static_logs[$i]}" >&2
    rc=1
  fi
done
static_pids=()  # reaped: the cleanup must not signal their ids again
exit "$rc"
