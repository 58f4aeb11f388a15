"""``python -m cockpit.pilot.stackcheck [--extension MODULE ...]``: the software stack as JSON.

Runs in its own process because it imports torch (and initialises CUDA): the
``cockpit stack`` command that reads its output never does, so a broken CUDA
install shows as a failed item instead of taking the CLI down. Prints one
line, ``cockpit-stack: `` and a JSON object: ``cockpit.pilot.meter.stack_info`` plus, per GPU, whether a
small matmul ran (in bf16 too when supported), and per declared extension,
whether it imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any, TypedDict

MARK = "cockpit-stack: "


def _short(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


class Kernels(TypedDict, total=False):
    """One GPU's tiny matmul: whether it ran right in fp32 (and bf16), or the error it raised."""

    index: int
    fp32: bool
    bf16: bool
    error: str


def kernels(torch: Any, bf16: object) -> list[Kernels]:
    """Run a tiny matmul on every visible GPU: catches a driver/runtime or architecture mismatch
    that ``torch.cuda.is_available()`` alone does not."""
    out = []
    for i in range(torch.cuda.device_count()):
        row: Kernels = {"index": i}
        try:
            a = torch.ones(64, 64, device=f"cuda:{i}")
            row["fp32"] = float((a @ a).sum().item()) == 64.0 * 64 * 64
            if bf16:
                b = a.to(torch.bfloat16)
                row["bf16"] = float((b @ b).float().sum().item()) == 64.0 * 64 * 64
            torch.cuda.synchronize(i)
        except Exception as exc:  # noqa: BLE001 - reported as the item's failure
            row["error"] = _short(exc)
        out.append(row)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m cockpit.pilot.stackcheck")
    ap.add_argument("--extension", action="append", default=[], help="a module the task imports")
    args = ap.parse_args(argv)
    result: dict[str, object] = {}  # stack_info's fields, the kernels, the extensions: printed as JSON
    try:
        import torch

        from .meter import Nvml, stack_info

        cuda = torch.cuda.is_available()
        result.update(stack_info(torch.device("cuda", 0) if cuda else torch.device("cpu"), Nvml()))
        result["kernels"] = kernels(torch, result.get("bf16")) if cuda else []
    except Exception as exc:  # noqa: BLE001 - the stack itself is broken: say how
        result["torch_error"] = _short(exc)
        result["traceback"] = traceback.format_exc()[-2000:]
    exts = []
    for name in args.extension:
        try:
            mod = __import__(name)
            exts.append({"module": name, "ok": True, "version": str(getattr(mod, "__version__", "") or "")})
        except BaseException as exc:  # noqa: BLE001 - an extension may even call sys.exit on import
            exts.append({"module": name, "ok": False, "error": _short(exc)})
    result["extensions"] = exts
    # Prefixed: an extension that prints on import must not be mistaken for the result.
    print(MARK + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
