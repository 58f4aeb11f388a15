"""report.html in a real browser: headless Chromium renders the page and every chart in it (issue 39).

CI installs Debian's chromium (.ci/run); the test looks for it on PATH and at /usr/bin/chromium.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from cockpit import report as rp
from cockpit.cli import main
from cockpit.report import charts
from tests.fake_runs import gpu_stack, make_campaign, series_run, standard_gates, write_run

pytest.importorskip("matplotlib", reason="the cockpit[report] extra (setup.sh --test installs it)")
pytestmark = pytest.mark.slow  # two Chromium starts

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


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


def browser(*args: str) -> subprocess.CompletedProcess[str]:
    exe = chromium()
    if exe is None:
        pytest.skip("no Chromium here: `apt-get install chromium` (CI's .ci/run installs it)")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120, check=False
        )


def test_report_html_shows_every_chart_in_a_browser(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    write_run(camp, stack=gpu_stack(), gates=standard_gates(1000.0, 1600.0))
    write_run(camp, variant="ckpt", stack=gpu_stack(), gates=standard_gates(600.0, 700.0))
    for seed, v in enumerate((1.90, 1.92, 1.94)):
        series_run(camp, "lr1e-4", seed, v)
    for seed, v in enumerate((2.30, 2.35, 2.33)):
        series_run(camp, "lr5e-5", seed, v)
    series_run(camp, "lr2e-4", 0, None, status="diverged", reason="diverged: loss 18.2 at update 40")
    assert main(["report", str(camp)]) == 0
    page = (camp / "report" / rp.HTML_FILE).resolve()

    # the DOM as the browser built it: every picture an inline <svg> with its drawn series
    dom = browser("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    for name, gid in (
        (charts.LOSS_SVG, "loss-median-0"),
        (charts.QUALITY_SVG, "seeds-0"),
        (charts.MEMORY_SVG, "memory-1-peak_reserved-0"),
        (charts.TIME_SVG, "time-0-0"),
        (charts.PLAN_SVG, "plan-runs-0"),
    ):
        assert f'data-src="{name}"' in dom.stdout, name
        assert f'id="{gid}"' in dom.stdout, (name, gid)

    # the pixels: a screenshot tall enough for the whole page shows coloured chart lines, not a blank page
    shot = tmp_path / "report.png"
    r = browser(f"--screenshot={shot}", "--window-size=1100,9000", page.as_uri())
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    from PIL import Image  # matplotlib's own dependency

    img = Image.open(shot).convert("RGB")
    assert img.size == (1100, 9000)
    small = img.resize((275, 2250))
    # pixels far from grey: matplotlib's C0..C9 lines, bands and bars (the report's text is black on white)
    px = small.tobytes()
    coloured = sum(1 for i in range(0, len(px), 3) if max(px[i : i + 3]) - min(px[i : i + 3]) > 60)
    assert coloured > 2000, f"only {coloured} coloured pixels of {275 * 2250}: the charts did not render"
