#!/usr/bin/env bash
# Regenerate docs/examples/h200 from one run on one H200 (issue 26, item 7): the decode sweep of
# conf/experiment/h200_example.yaml at the verdict's four batches (launch, decode, collectives,
# the graphed whole step of every layout, ceilings and power, all from the same code), the
# fused-MoE tuning left out (the folder's tuning journals are replayed where it is re-rendered).
# Plan about 10 minutes of device time: ask `status` first, since a call cut by the session's
# device budget brings nothing back (2026-12-04: 334 s were left and the sweep wrote nothing).
# Carry .whl and gpu/bin (tools/fetch_wheels.py, gpu/build_cutlass.sh). Then, here:
#   tools/import_example.sh FILES_AT/ex/results.tgz docs/examples/h200
# OMIT_LAYOUTS=1 leaves out the whole steps and what needs them (tables, verdict, report):
# launch, decode, collectives, ceilings and power alone (327 s on 2026-12-04), for layouts
# measured in another call (tools/h200_layouts.sh); join the two runs' per-cell outputs with the
# `tables` rule here.
# Usage (on the GPU machine): tools/h200_example.sh OUT_DIR
set -uo pipefail
out=${1:?usage: tools/h200_example.sh OUT_DIR}
[[ ${OMIT_LAYOUTS:-0} == 1 ]] && export TILESWEEP_TARGETS="--omit-from bench_layout"
TILESWEEP_TIMEOUT=${TILESWEEP_TIMEOUT:-540} "$(dirname "$0")/device_sweep.sh" "$out" \
  experiment=h200_example 'deployment.batches=[1,8,64,512]' backend.fused_moe.enabled=false
