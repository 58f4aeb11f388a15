#!/usr/bin/env bash
# Set up Cockpit in .venv: ./setup.sh (to use it) or ./setup.sh test (to test it too).
#
# Safe to run again: an existing .venv is kept, and pip runs only when
# pyproject.toml or the mode changed since the last successful run.
# torch: a python3 that already imports torch (a GPU box with its own CUDA
# build) is reused through --system-site-packages and torch is not installed;
# otherwise torch 2.13.0 is installed first (any torch if that one is missing).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

TORCH_VERSION="2.13.0"
VENV=".venv"
PY="${PYTHON:-python3}"
LOG="$VENV/setup.log"

mode="${1:-}"
case "$mode" in
  "") extra="." ;;
  test) extra=".[test,ray,report]" ;;
  *)
    echo "setup.sh: unknown argument '$mode'. Use ./setup.sh (to use Cockpit) or ./setup.sh test (to run its tests)." >&2
    exit 2
    ;;
esac

fail() {
  echo "setup.sh: $1" >&2
  if [[ -s "$LOG" ]]; then
    echo "--- last lines of $LOG ---" >&2
    tail -n 25 "$LOG" >&2
  fi
  exit 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
  command -v "$PY" >/dev/null 2>&1 \
    || { echo "setup.sh: no $PY on PATH. Install Python 3.10 or newer (or set PYTHON=/path/to/python3)." >&2; exit 1; }
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "setup.sh: $PY is Python $("$PY" -c 'import platform; print(platform.python_version())'); Cockpit needs 3.10 or newer (set PYTHON=/path/to/python3.10+)." >&2; exit 1; }
  venv_args=()
  if "$PY" -c 'import torch' >/dev/null 2>&1; then
    venv_args=(--system-site-packages)
    echo "setup.sh: $PY already has torch $("$PY" -c 'import torch; print(torch.__version__)'); the environment reuses it."
  fi
  echo "setup.sh: creating $VENV"
  "$PY" -m venv ${venv_args[@]+"${venv_args[@]}"} "$VENV" \
    || { rm -rf "$VENV"; echo "setup.sh: could not create $VENV with $PY -m venv. On Debian or Ubuntu: apt-get install python3-venv, then run ./setup.sh again." >&2; exit 1; }
fi

: >"$LOG"
pip() { "$VENV/bin/python" -m pip "$@" >>"$LOG" 2>&1; }

# Cockpit's own modules compiled to bytecode now: Python writes none where PYTHONDONTWRITEBYTECODE is set (many
# container images set it), and compiling them again at every start costs the TUI and each CLI call about 0.13 s.
# Python still checks each file's time stamp, so an edited module is compiled afresh and never run stale.
# `cockpit` lives in $VENV/bin, which is not on PATH until the environment is activated: say so on every exit,
# since the walk-through's commands are typed as plain `cockpit`.
say_path() { echo "setup.sh: to type \`cockpit\` as the docs do, run: source $VENV/bin/activate   (or write $VENV/bin/cockpit)"; }
compile_bytecode() { "$VENV/bin/python" -m compileall -q cockpit >>"$LOG" 2>&1 || echo "setup.sh: could not compile cockpit's bytecode (see $LOG); it starts a little slower."; }

# Packages whose compiled parts must match torch's: imported one by one in a fresh interpreter.
TORCH_COMPILED=(torchvision torchaudio torchtext)
removed="$VENV/cockpit-removed.txt"
check_loads() {
  : >"$removed"
  local name why
  for name in "${TORCH_COMPILED[@]}"; do
    "$VENV/bin/python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$name') is None)" 2>/dev/null || continue
    if ! why=$("$VENV/bin/python" -W ignore -c "import $name" 2>&1); then
      why=$(printf '%s\n' "$why" | tail -n 1)
      pip uninstall -y "$name" || fail "could not remove $name, which cannot load beside torch here ($why)."
      echo "$name: $why" >>"$removed"
    fi
  done
  if [[ -s "$removed" ]]; then
    echo "setup.sh: removed what cannot load beside torch $("$VENV/bin/python" -W ignore -c 'import torch; print(torch.__version__)') (its build was made for another torch):"
    sed 's/^/  /' "$removed"
    echo "  Everything that needs it is left out; install a build that matches this torch to use it."
  fi
  if [[ "$mode" == test ]]; then
    # the documented integrations and the shelf's model code, as the examples and the tests import them
    "$VENV/bin/python" -W ignore -c 'import transformers, peft, lightning, accelerate
from transformers import Trainer, LlamaConfig, T5ForConditionalGeneration, MixtralForCausalLM, CLIPModel' >>"$LOG" 2>&1 \
      || fail "transformers, PEFT or Lightning does not import in $VENV (see the traceback below)."
  fi
}

# The demo campaign is the user's working copy (its pilots write their runs into it), made from the one that ships
# inside the package, so piloting it never changes a file git tracks.
make_demo() {
  if [[ ! -e campaigns/demo/campaign.toml ]]; then
    "$VENV/bin/cockpit" new demo --example demo >>"$LOG" 2>&1 && echo "setup.sh: made campaigns/demo (the built-in demo campaign)" \
      || echo "setup.sh: could not make campaigns/demo (see $LOG); run .venv/bin/cockpit new demo --example demo"
  fi
}

stamp="$VENV/.cockpit-setup"
# what the environment is made from: the project's requirements and this script's own steps
made_from="$(cat pyproject.toml "${BASH_SOURCE[0]}" | sha256sum | cut -c1-64)"
want="$mode $made_from"
base=" $made_from"
if [[ -f "$stamp" ]] && "$VENV/bin/python" -c 'import cockpit, torch' >/dev/null 2>&1 \
  && { grep -qxF "$want" "$stamp" || { [[ -z "$mode" ]] && grep -qxF "test${base}" "$stamp"; }; }; then
  compile_bytecode
  make_demo
  echo "setup.sh: $VENV is up to date."
  say_path
  exit 0
fi

if "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
  :
else
  echo "setup.sh: installing torch $TORCH_VERSION (this can take a few minutes)"
  if ! pip install -q "torch==$TORCH_VERSION"; then
    echo "setup.sh: torch $TORCH_VERSION is not available here; installing the newest torch instead"
    pip install -q torch || fail "could not install torch. Check the network or pip's index, or install torch in $PY first (it is then reused)."
  fi
fi

echo "setup.sh: installing cockpit${mode:+ with its test tools}"
# Packages that depend on torch (torchvision, transformers) must be installed against the torch already here:
# a constraints file pins it, so pip never replaces a CPU (or the user's own CUDA) build with another one.
pins="$VENV/torch-constraints.txt"
"$VENV/bin/python" -W ignore -c 'import torch; print(f"torch=={torch.__version__}")' >"$pins"
pip install -q -c "$pins" -e "$extra" || fail "could not install cockpit from $(pwd) with pip install -e '$extra' (torch pinned to $(cat "$pins"))."

# A package with compiled parts built against another torch (PyPI's torchvision beside a CPU torch: "operator
# torchvision::nms does not exist") cannot load here, and transformers, PEFT and Lightning import it whenever it is
# installed, so one broken package breaks them all. Each one that cannot load is removed, and said so: the rest then
# import, and the tests run in exactly this environment (no test repairs a third-party package).
check_loads

"$VENV/bin/cockpit" --version >/dev/null 2>>"$LOG" || fail "cockpit was installed but does not start."
make_demo
compile_bytecode
echo "$want" >>"$stamp"
echo "setup.sh: ready. $("$VENV/bin/cockpit" --version), torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
say_path
