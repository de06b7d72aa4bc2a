#!/usr/bin/env bash
# Drop-in engine config files that are true for decode (issue 38), on one GPU: the kept
# example's tuned picks (docs/examples/h200/engine_tune*/<engine>-<version>/picks_E=*.json) for
# GLM-5 TP1 (E=256, N=2048) and TP8 (E=256, N=256), bf16, fp8 and fp8 128x128 blocks, in vLLM's
# and SGLang's own kernels (the versions conf pins), re-checked decode-true (cold L2 over rotated
# weight copies, CUDA-graph replays) at every batch key M = 1-4,096 on uniform and Zipf routing
# against what the engine runs today (its shipped table from the pinned wheel, else its default
# rule) on two draws; a key keeps the pick only where it won beyond the noise on both, else it
# takes the engine's current config; then one held-out draw (tools/engine_tables.py). Not a new
# tune: a full tune of 12 files does not fit the 7 minutes. Files are decided fp8_block first,
# then bf16, then fp8, TP8 before TP1; one not started within the budget is withheld and says
# so in dropins.csv (run again with e.g. --format fp8 to decide the rest).
# Each file's configs are compiled (15 processes) just before it is timed. Carry .whl
# (tools/fetch_wheels.py) and .engine_kernels (tools/fetch_engine_kernels.py at this commit or
# later: kernels, shipped tables and get_config_file_name, with hashes; an older extraction
# lacks the tables and is refused before anything runs); the Triton cache is kept in
# .triton_cache between calls.
# Usage (on the GPU machine, repo root): tools/h200_engine_tables.sh OUT_DIR [engine_tables args]
# Writes OUT_DIR/gpus.csv, tables.log, dropins.csv and engine_tables.tgz (exports, checks).
set -uo pipefail
out=${1:?usage: tools/h200_engine_tables.sh OUT_DIR [ARGS ...]}
shift
mkdir -p "$out"
start=$(date +%s)
# shellcheck source=tools/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh" || exit 1
export TRITON_CACHE_DIR="$PWD/.triton_cache"
python3 - <<'PY' || exit 1
import json
from pathlib import Path

from tilesweep.config import compose

for engine, version in compose([])["backend"]["fused_moe"]["engine_versions"].items():
    manifest = Path(f".engine_kernels/{engine}-{version}/manifest.json")
    got = json.loads(manifest.read_text()) if manifest.is_file() else {}
    if "tables" not in got or "names_py_sha256" not in got:
        raise SystemExit(f"{manifest}: missing or without shipped tables; run "
                         "tools/fetch_engine_kernels.py of this commit and carry .engine_kernels")
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpus.csv"
python3 -c 'import torch, triton; p = torch.cuda.get_device_properties(0)
print(f"torch {torch.__version__}, triton {triton.__version__}, L2 {p.L2_cache_size} bytes")' |
  tee "$out/tables.log"
timeout -k 10 "${TILESWEEP_TABLES_LIMIT_S:-370}" python3 tools/engine_tables.py --out "$out/tables" \
  --budget-s "${TILESWEEP_TABLES_BUDGET_S:-300}" "$@" 2>&1 | tee -a "$out/tables.log"
echo "engine tables: $(($(date +%s) - start)) s" | tee -a "$out/tables.log"
cp "$out/tables/dropins.csv" "$out/dropins.csv" 2>/dev/null
tar -C "$out" -czf "$out/engine_tables.tgz" tables && rm -rf "$out/tables"
