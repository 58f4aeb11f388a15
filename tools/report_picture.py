"""Make docs/images/report-demo.png: the demo's report.html, its charts, as headless Chromium shows it.

    python tools/report_picture.py [CAMPAIGN]   (default campaigns/demo, after its pilot and series)

It runs `cockpit report CAMPAIGN` (the report itself draws every chart), renders report.md's Charts section
with report.html's own renderer, opens it in Debian's chromium and writes the screenshot into docs/images.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def main(argv: list[str]) -> int:
    camp = Path(argv[0] if argv else "campaigns/demo")
    exe = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if exe is None:
        print("tools/report_picture.py: no Chromium here; install it (`apt-get install chromium`) and run again")
        return 2
    sys.path.insert(0, str(ROOT))
    from cockpit.cli import main as cockpit

    if cockpit(["report", str(camp)]) != 0:
        return 1
    from cockpit.report import html

    folder = (camp / "report").resolve()
    text = (folder / "report.md").read_text("utf-8")
    charts = text[text.index("## Charts") : text.index("### Loss curves")]  # the pictures, as report.html has them
    page = folder / ".charts.html"
    page.write_text(html.render(f"# {text.splitlines()[0].lstrip('# ')}\n\n{charts}", folder, "charts"), "utf-8")
    target = ROOT / "docs" / "images" / "report-demo.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={target}",
                "--window-size=1000,3000",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    page.unlink()
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
