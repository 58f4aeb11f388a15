"""The tested environment is the user's: what ``./setup.sh test`` builds runs every documented example as it is.

Two halves. The environment: in a fresh interpreter with nothing of the tests on its path, every integration the
README documents imports, and every package whose compiled parts must match torch's either loads or is not
installed (set-up removes the ones that cannot load, and says so). The tests: none of them repairs a third-party
package (replaces a module in ``sys.modules``, hooks the import system, ships a ``sitecustomize``), so a green suite
means the user's environment works, not a patched copy of it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("cockpit", "tests", "__main__")

DOCUMENTED = """
import transformers, peft, lightning, accelerate
from transformers import Trainer, TrainingArguments, LlamaConfig, T5ForConditionalGeneration, MixtralForCausalLM
from transformers import CLIPModel, GPT2LMHeadModel, BertForSequenceClassification
from peft import LoraConfig, get_peft_model
import cockpit.integrations.hf, cockpit.integrations.lightning
print("ok")
"""


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}


def fresh_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a new interpreter of this environment, with nothing of the tests on its path."""
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=clean_env(),
    )


def compiled_against_torch() -> list[str]:
    """The names set-up checks, read from setup.sh itself (one list, not two)."""
    line = next(ln for ln in (ROOT / "setup.sh").read_text().splitlines() if ln.startswith("TORCH_COMPILED=("))
    return line.split("(", 1)[1].rstrip(")").split()


@pytest.mark.parametrize("name", compiled_against_torch())
def test_a_package_built_against_torch_loads_or_is_absent(name: str, tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        f"if importlib.util.find_spec({name!r}) is None: print('absent'); sys.exit(0)\n"
        f"import {name}\n"
        "print('loads')\n"
    )
    proc = fresh_python(code, tmp_path)
    assert proc.returncode == 0, f"{name} is installed but cannot load: {proc.stderr[-1500:]}"
    assert proc.stdout.strip() in ("absent", "loads")


def repairs(path: Path, root: Path = ROOT) -> list[str]:
    """Places in a test file that change a third-party package for the process: module swaps and import hooks."""
    found: list[str] = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            if (
                isinstance(t, ast.Subscript)
                and ast.unparse(t.value) == "sys.modules"
                and not (isinstance(t.slice, ast.Constant) and str(t.slice.value).startswith(OURS))
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if owner in ("sys.meta_path", "sys.path_hooks") and node.func.attr in ("insert", "append"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_the_repair_scan_sees_a_module_swap(tmp_path: Path) -> None:
    """The scan above is not vacuous: a module swap and an import hook, the shape of the repair the tests used to
    carry, are found (written into a scratch file, never run)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import sys, types\n"
        "sys.modules['somepkg._registrations'] = types.ModuleType('x')\n"
        "sys.meta_path.insert(0, object())\n"
        "sys.modules['cockpit_task_1'] = types.ModuleType('ours')\n"
    )
    hits = repairs(probe, tmp_path)
    assert len(hits) == 2 and "somepkg" in hits[0] and "meta_path" in hits[1]
