#!/usr/bin/env bash
# Issue 29's GPU checks, in one go on a lent GPU machine (at most 7 minutes: BUDGET_S; bench/gpu_check.py says what each
# section measures). Writes gpu_check.json, summary.txt, tui.txt and log.txt to $OUT; copy gpu_check.json to
# bench/results/ afterwards.
#
# The machine's python3 has torch, psutil, nvidia-ml-py and rich; Cockpit also needs tomli-w, and the TUI textual
# with its pure-Python dependencies: `bash bench/gpu_wheels.sh` fetches them here into .whl/ (ignored by git). Then,
# through the device tool, from the repository root: command `bash bench/gpu_check.sh`, carry [".whl"], timeout_s 560.
# Here, without a GPU, `python bench/gpu_check.py --rehearse` runs the same sections at toy sizes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "installing the carried wheels failed" >&2; exit 1; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import tomli_w, textual, psutil, pynvml, rich, torch" \
  || { echo "a package Cockpit needs is missing: run bench/gpu_wheels.sh here and carry .whl" >&2; exit 1; }
export PYTHONUNBUFFERED=1
case " $* " in *" --rehearse "*) need=() ;; *) need=(--require-cuda) ;; esac  # a GPU box without CUDA stops at once
python3 bench/gpu_check.py --out "$OUT" --budget-s "${BUDGET_S:-420}" ${need[@]+"${need[@]}"} "$@" 2>&1 | tee "$OUT/log.txt"
