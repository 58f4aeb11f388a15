"""Every repository file a comment, a docstring or a config names exists (text drifts when files move).

Scanned: the comments and docstrings of cockpit/ and tools/, pyproject.toml and .ci/run. A path counts when it
has a folder and a file name with a source or config suffix (``tui/seriesctl.py``, ``tests/test_x.py``), or is a
folder under a top folder of the repository; it is found from the repository's root, from ``cockpit/``, from
``tests/`` or from the naming file's folder. Paths that are examples of a user's (or another project's) files
are listed in ``EXAMPLES``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(
    r"(?<![\w./<-])([\w.-]+/[\w./-]*\.(?:py|tcss|toml|md|sh|yml|tmpl)\b"
    r"|(?:cockpit|tests|bench|docs|tools|\.ci|campaigns)/[\w./-]*\w"
    r"|README\.md|setup\.sh|pyproject\.toml|mkdocs\.yml)"
)
EXAMPLES = {
    "campaigns/demo",  # made by `cockpit new demo --example demo`, not in the repository
    "campaigns/demo/campaign.toml",
    "campaigns/x",  # a user's campaign, in a docstring's example
    "campaigns/NAME/campaign.toml",  # what `cockpit new NAME` writes
    "campaigns/train",  # what `cockpit probe -- python train.py` makes for a script
    "path/to/file.py",  # a task entry's form, in the task contract's docstrings
    "report/report.md",  # what `cockpit report` writes into a campaign
    "api/libnvml.py",  # nvitop's module, which cockpit/nvml.py follows
}


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                out.append((node.body[0].lineno, doc))
    return out


def test_the_scan_sees_a_path_in_a_comment_and_in_a_docstring(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('"""See tests/test_gone.py."""\n\nx = 1  # and cockpit/gone.py\ny = "tests/not_a_comment.py"\n')
    found = [PATH.findall(text) for _, text in _comments_and_docstrings(f)]
    assert sorted(p for ps in found for p in ps) == ["cockpit/gone.py", "tests/test_gone.py"]
