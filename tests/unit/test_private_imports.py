"""No Cockpit module imports another module's underscore name (tools/private_imports.py, also run by .ci/run)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _checker():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("private_imports", ROOT / "tools" / "private_imports.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("private_imports", mod)
    spec.loader.exec_module(mod)
    return mod


def test_no_cockpit_module_imports_a_private_name_of_another() -> None:
    found = [line for path in sorted((ROOT / "cockpit").rglob("*.py")) for line in _checker().offences(path)]
    assert found == [], "\n".join(found)


def test_the_checker_sees_relative_absolute_and_attribute_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "cockpit" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "cockpit" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _hidden(): ...\ndef _own(): ...\nx = _own()\n")
    (pkg / "b.py").write_text(
        "from .a import _hidden\nfrom cockpit.sub.a import _hidden as h\nfrom . import a\nfrom .a import __doc__\n"
        "a._hidden()\n"
    )
    check = _checker()
    assert check.offences(pkg / "a.py", root=tmp_path) == []
    assert sorted(check.offences(pkg / "b.py", root=tmp_path)) == [
        "cockpit/sub/b.py:1: _hidden from cockpit.sub.a",
        "cockpit/sub/b.py:2: _hidden from cockpit.sub.a",
        "cockpit/sub/b.py:5: _hidden from cockpit.sub.a",
    ]
