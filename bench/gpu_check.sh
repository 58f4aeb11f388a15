#!/usr/bin/env bash
# The GPU checks, in one short run on a lent GPU machine (about 5 minutes):
# real NVML and CUDA counters in a pilot, a real out-of-memory, the overhead benchmark.
# Run from the repository root:  bash bench/gpu_check.sh
# The machine's python3 must have torch, psutil, nvidia-ml-py and rich; tomli-w is
# installed from .whl/ when present (pip download tomli-w -d .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.txt"
python3 - <<'PY' | tee "$OUT/counters.txt"
import time, torch, pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
t = time.perf_counter(); torch.cuda.synchronize(); print("cuda init+sync s", round(time.perf_counter() - t, 3))
for name, fn in [("memory_allocated", lambda: torch.cuda.memory_allocated()), ("memory_stats", lambda: torch.cuda.memory_stats()),
                 ("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h)), ("synchronize", torch.cuda.synchronize)]:
    t = time.perf_counter()
    for _ in range(1000): fn()
    print(f"{name}: {(time.perf_counter() - t) * 1e3:.1f} us per call")
PY
rm -rf /tmp/gc && mkdir -p /tmp/gc && cp -r campaigns/demo /tmp/gc/ && rm -rf /tmp/gc/demo/runs
echo "== pilot on the GPU"; python3 -m cockpit pilot /tmp/gc/demo --json > "$OUT/pilot.json"; echo "exit $?"
python3 -m cockpit pilot /tmp/gc/demo 2>/dev/null | tail -40 | tee "$OUT/pilot.txt"
echo "== a real out-of-memory (a ~150 GB model)"
python3 -m cockpit pilot /tmp/gc/demo --set d_model=8192 --set n_layers=48 --set n_heads=64 --json > "$OUT/oom.json"; echo "exit $? (3 = OOM)"
python3 -c "import json; d=json.load(open('$OUT/oom.json')); print(d['status'], d['phase'], d['gates'][-1]['message'][:300])"
echo "== overhead benchmark"; python3 bench/overhead.py --device cuda --rounds 5 --updates 50 | tee "$OUT/overhead.txt"
echo "== overhead at GPT-2-like width"; python3 bench/overhead.py --device cuda --rounds 5 --updates 20 --d-model 768 --microbatch 8 | tee -a "$OUT/overhead.txt"
cp -r /tmp/gc/demo/runs "$OUT/runs" 2>/dev/null; find "$OUT/runs" -name '*.pt' -delete 2>/dev/null
echo "done: figures in $OUT"
