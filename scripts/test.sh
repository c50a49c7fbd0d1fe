#!/usr/bin/env bash
# Run the manowar-memory test suite against real servers.
#
#   bash scripts/test.sh                 whole suite (-q)
#   bash scripts/test.sh tests/x.py -k y any pytest arguments
#
# 1. Creates .venv (python3 -m venv) if missing and installs CPU torch 2.13.0, the project with
#    the [all,dev] extras and the integration packages under integrations/ that exist. pip is
#    skipped when neither the pyproject files nor this recipe changed since the last install.
# 2. Installs Debian's chromium when missing (the docs browser check), then starts MongoDB,
#    Redis and the Temporal dev server (scripts/services.sh start).
# 3. Runs pytest with the servers required (MANOWAR_REQUIRE_SERVICES=1) and no model downloads.
# Exits with pytest's code; "no tests collected" (5) counts as a failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
VENV="$REPO/.venv"
PY="${PYTHON:-python3}"
TORCH="torch==2.13.0"   # CPU wheel from pip's find-links; never let pip pick another torch
INTEGRATIONS=(integrations/langchain_manowar integrations/llama_index_manowar)
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[test %s] %s\n' "$(date +%T)" "$*" >&2; }

# ---------------------------------------------------------------- install

[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }

editables=(-e ".[all,dev]")
stamp_inputs=(pyproject.toml)
for dir in "${INTEGRATIONS[@]}"; do
  if [[ -f "$dir/pyproject.toml" ]]; then
    editables+=(-e "$dir")
    stamp_inputs+=("$dir/pyproject.toml")
  fi
done
stamp_file="$VENV/.manowar-install-stamp"
stamp=$({ echo "$TORCH ${editables[*]}"; cat "${stamp_inputs[@]}"; } | sha256sum | cut -d' ' -f1)

if [[ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]]; then
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  echo "$TORCH" >"$constraints"
  log "pip: installing $TORCH"
  "$VENV/bin/python" -m pip install -q "$TORCH"
  log "pip: installing ${editables[*]}"
  "$VENV/bin/python" -m pip install -q -c "$constraints" "${editables[@]}"
  echo "$stamp" >"$stamp_file"
else
  log "dependencies up to date (delete $stamp_file to force a reinstall)"
fi

# ---------------------------------------------------------------- browser

# Debian's headless Chromium, for the docs site's browser check (tests/test_docs.py).
if ! command -v chromium >/dev/null 2>&1; then
  [[ $EUID -eq 0 ]] || { log "FAIL: chromium is missing and installing it needs root (apt-get install chromium)"; exit 1; }
  log "apt: installing chromium"
  [[ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]] || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# ---------------------------------------------------------------- servers

bash scripts/services.sh start
ENV_FILE="${MANOWAR_SERVICES_ROOT:-$HOME/.cache/manowar-services}/services.env"
set -a
# shellcheck disable=SC1090
source "$ENV_FILE"
set +a
export MANOWAR_REQUIRE_SERVICES=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# ---------------------------------------------------------------- tests

[[ $# -gt 0 ]] || set -- -q
set +e
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  log "FAIL: pytest collected no tests (exit code 5)"
  exit 1
fi
exit "$rc"
