#!/usr/bin/env bash
# Fetch, into .whl/, the pure-Python wheels the GPU machine's python3 lacks for bench/gpu_check.sh: tomli-w (Cockpit
# writes TOML) and textual with the dependencies its image does not hold (the TUI section). The device tool carries
# .whl/ when a run names it in `carry`; git ignores it (the line added to .git/info/exclude below). Run here, once
# per session, from the repository root: bash bench/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
rm -rf .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  textual==8.2.8 tomli-w==1.2.0 mdit-py-plugins==0.7.0 linkify-it-py==2.2.0 uc-micro-py==2.0.0 platformdirs==4.14.9
ls .whl
