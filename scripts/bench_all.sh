#!/usr/bin/env bash
# Regenerate every benchmark data file the docs quote (docs/data/<name>.json) and the plots drawn
# from them (docs/assets/*.png), on this checkout's code, with the shared virtual environment.
#
#   bash scripts/bench_all.sh PATH/locomo-dev.json            every benchmark (hours: run it on a quiet machine)
#   bash scripts/bench_all.sh PATH/locomo-dev.json latency    some of them (names: python benchmarks/suite.py --list)
#
# The commands are those of benchmarks/suite.py; each data file records its command line, the
# commit (and whether the checkout had uncommitted changes), the core count and the date. The
# LoCoMo data (CC BY-NC) is read from where it is and never copied into the repository. Some
# benchmarks need servers (scripts/services.sh start) or the [bench] extra: suite.py --list says which.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }
LOCOMO=$1; shift
[[ -f "$LOCOMO" ]] || { echo "no LoCoMo file at $LOCOMO" >&2; exit 2; }
VENV="${MANOWAR_VENV:-${MANOWAR_CACHE:-$HOME/.cache/manowar-memory}/venv}"
PY="$VENV/bin/python"
[[ -x "$PY" ]] || PY=python3
export PYTHONPATH="$PWD:$PWD/integrations/langchain_manowar:$PWD/integrations/llama_index_manowar${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$PY" benchmarks/suite.py --locomo "$LOCOMO" "$@"
