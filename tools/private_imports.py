"""List every name that starts with an underscore imported from another Cockpit module (house rule: underscore means private).

Catches `from cockpit.x import _name`, the relative `from .x import _name`, and `module._name` where `module` was imported
from Cockpit. Ruff's PLC2701 does not cover this: it ignores imports inside the first-party package. Run by `.ci/run`;
exits 1 and prints `file:line: name from module` for each offence.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "cockpit"
# Offences in modules another branch is restructuring (issue 27's records part); each leaves this list when fixed.
PENDING: set[tuple[str, str]] = set()  # cross-module private names waiting for a rename: none left


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def offences(path: Path, root: Path = ROOT, pending: frozenset[tuple[str, str]] = frozenset(PENDING)) -> list[str]:
    """Every cross-module private name `path` reaches for, as `file:line: name from module`, less those `pending`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module_name(path, root)
    is_package = path.name == "__init__.py"
    found: list[str] = []
    modules: dict[str, str] = {}  # local alias -> Cockpit module it names
    rel = path.relative_to(root)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(me, is_package, node)
            if source != PACKAGE and not source.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                if _private(alias.name) and source != me and (rel.as_posix(), alias.name) not in pending:
                    found.append(f"{rel}:{node.lineno}: {alias.name} from {source}")
                modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + ".") and any(_private(p) for p in alias.name.split(".")):
                    found.append(f"{rel}:{node.lineno}: {alias.name}")
                if alias.asname and alias.name.startswith(PACKAGE):
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
            and (rel.as_posix(), node.attr) not in pending
        ):
            found.append(f"{rel}:{node.lineno}: {node.attr} from {modules[node.value.id]}")
    return found


def main(argv: list[str]) -> int:
    folders = [ROOT / a for a in argv] or [ROOT / PACKAGE]
    found = [line for folder in folders for path in sorted(folder.rglob("*.py")) for line in offences(path)]
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} import(s) of a private name across modules: make the name public or move the caller")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
