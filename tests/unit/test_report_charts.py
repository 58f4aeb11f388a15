"""The report's SVG pictures: written beside report.md, embedded, and drawing exactly the records' numbers."""

from __future__ import annotations

import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cockpit import report as rp
from cockpit import runs
from cockpit.cli import main
from cockpit.report import charts
from tests.fake_runs import make_campaign, series_run

pytest.importorskip("matplotlib", reason="the cockpit[report] extra (setup.sh --test installs it)")

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def campaign(tmp_path: Path) -> Path:
    camp = make_campaign(tmp_path)
    for seed, v in enumerate((1.90, 1.92, 1.94)):
        series_run(camp, "lr1e-4", seed, v)
    for seed, v in enumerate((2.30, 2.35, 2.33)):
        series_run(camp, "lr5e-5", seed, v)
    series_run(camp, "lr2e-4", 0, 1.91)
    series_run(camp, "lr2e-4", 1, None, status="diverged", reason="diverged: loss 18.2 at update 40")
    return camp


def _points(root: ET.Element, gid: str) -> list[tuple[float, float]]:
    group = root.find(f".//{SVG}g[@id='{gid}']")
    assert group is not None, f"no element with id {gid} in the SVG"
    path = group.find(f".//{SVG}path")
    assert path is not None
    nums = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.get("d", ""))]
    return list(zip(nums[::2], nums[1::2], strict=True))


def _affine(pairs: list[tuple[float, float]]) -> None:
    """Every (value, svg coordinate) pair lies on one line: the SVG draws the values, scaled by the axes."""
    (v0, s0), (v1, s1) = min(pairs), max(pairs)
    assert v1 != v0
    a = (s1 - s0) / (v1 - v0)
    for v, s in pairs:
        assert s == pytest.approx(s0 + a * (v - v0), abs=0.02), (v, s)


def test_report_writes_and_embeds_the_svgs(campaign: Path) -> None:
    assert main(["report", str(campaign)]) == 0
    folder = campaign / "report"
    text = (folder / "report.md").read_text("utf-8")
    assert f"]({charts.LOSS_SVG})" in text and f"]({charts.QUALITY_SVG})" in text
    assert "┤" in text  # the text charts stay
    for name in (charts.LOSS_SVG, charts.QUALITY_SVG):
        body = (folder / name).read_text("utf-8")
        assert "<dc:date>" not in body  # deterministic: no date
    # the same campaign gives the same bytes
    first = (folder / charts.LOSS_SVG).read_bytes()
    assert main(["report", str(campaign)]) == 0
    assert (folder / charts.LOSS_SVG).read_bytes() == first


def test_loss_svg_draws_the_median_of_the_records(campaign: Path) -> None:
    assert main(["report", str(campaign)]) == 0
    root = ET.parse(campaign / "report" / charts.LOSS_SVG).getroot()
    from cockpit import notebook as nbm

    nb = nbm.load(campaign)
    res, _ = rp.results(nb)
    dirs = {r.id: r.dir for r in runs.campaign_runs(nb.directory)}
    xs_pairs, ys_pairs = [], []
    for i, r in enumerate(res):
        curves = [rp.read_curve(dirs[rid]) for rid, _, _ in r.runs]
        by_step: dict[float, list[float]] = {}
        for c in curves:
            for x, y in c:
                by_step.setdefault(x, []).append(y)
        expected = [(x, statistics.median(v)) for x, v in sorted(by_step.items())]
        drawn = _points(root, f"loss-median-{i}")
        assert len(drawn) == len(expected) > 1
        xs_pairs += [(e[0], d[0]) for e, d in zip(expected, drawn, strict=True)]
        ys_pairs += [(e[1], d[1]) for e, d in zip(expected, drawn, strict=True)]
    _affine(xs_pairs)
    _affine(ys_pairs)  # one scale for every variant: the curves are comparable
    diverged = [r for r in runs.campaign_runs(nb.directory) if r.status == "diverged"]
    assert diverged and root.find(f".//{SVG}g[@id='diverged-{diverged[0].id}']") is not None
    labels = "".join(root.itertext())
    assert "lr1e-4 (3 seeds) reference" in labels and "diverged run (its end)" in labels


def test_quality_svg_has_every_seed_and_the_reference_band(campaign: Path) -> None:
    assert main(["report", str(campaign)]) == 0
    root = ET.parse(campaign / "report" / charts.QUALITY_SVG).getroot()
    from cockpit import notebook as nbm

    res, _ = rp.results(nbm.load(campaign))
    pairs = []
    for i, r in enumerate(res):
        group = root.find(f".//{SVG}g[@id='seeds-{i}']")
        assert group is not None
        marks = group.findall(f".//{SVG}use")  # one marker per seed
        assert len(marks) == len(r.runs)
        pairs += [(v, float(m.get("x", "nan"))) for (_, _, v), m in zip(r.runs, marks, strict=True)]
    _affine(pairs)
    assert root.find(f".//{SVG}g[@id='reference-band']") is not None
    labels = "".join(root.itertext())
    for r in res:  # every variant's verdict is written beside its seeds
        assert f"{r.variant}: {r.verdict}" in labels


def _bar_widths(root: ET.Element, gid: str, n: int) -> list[float]:
    """The widths of bars ``<gid>-0 .. <gid>-(n-1)`` (horizontal bars: a closed path of four corners)."""
    out = []
    for k in range(n):
        group = root.find(f".//{SVG}g[@id='{gid}-{k}']")
        assert group is not None, f"no bar {gid}-{k} in the SVG"
        path = group.find(f".//{SVG}path")
        assert path is not None
        nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.get("d", ""))]
        xs = nums[::2]
        out.append(max(xs) - min(xs))
    return out


def _proportional(values: list[float], widths: list[float]) -> None:
    """Bars start at zero: each width is the value times one scale."""
    scale = max(widths) / max(values)
    for v, w in zip(values, widths, strict=True):
        assert w == pytest.approx(v * scale, abs=0.05), (v, w)


@pytest.fixture
def gpu_campaign(campaign: Path) -> Path:
    from tests.fake_runs import gpu_stack, standard_gates, write_run

    write_run(campaign, stack=gpu_stack(), gates=standard_gates(1000.0, 1600.0))
    write_run(campaign, variant="ckpt", stack=gpu_stack(), gates=standard_gates(600.0, 700.0, step_s=0.8))
    return campaign


def test_memory_and_time_svgs_draw_every_measured_pilots_rows(gpu_campaign: Path) -> None:
    from cockpit import notebook as nbm
    from cockpit import sheet as sh

    assert main(["report", str(gpu_campaign)]) == 0
    folder = gpu_campaign / "report"
    nb = nbm.load(gpu_campaign)
    sheets = [sh.build(nb, "lr1e-4"), sh.build(nb, "ckpt")]
    mem_root = ET.parse(folder / charts.MEMORY_SVG).getroot()
    time_root = ET.parse(folder / charts.TIME_SVG).getroot()
    values, widths, secs, twidths = [], [], [], []
    for j, s in enumerate(sheets):
        n = len(s.phases)
        for key in ("peak_allocated", "peak_reserved"):  # two counters side by side, never added
            values += [(r[key] or 0.0) / 2**20 for r in s.phases]  # type: ignore[literal-required]
            widths += _bar_widths(mem_root, f"memory-{j}-{key}", n)
        secs += [r["duration_s"] or 0.0 for r in s.phases]
        twidths += _bar_widths(time_root, f"time-{j}", n)
    _proportional(values, widths)
    _proportional(secs, twidths)
    labels = "".join(mem_root.itertext())
    assert "torch peak allocated" in labels and "torch peak reserved" in labels and "ckpt (" in labels
    text = (folder / "report.md").read_text("utf-8")
    assert f"]({charts.MEMORY_SVG})" in text and f"]({charts.TIME_SVG})" in text and f"]({charts.PLAN_SVG})" in text


def test_memory_svg_on_the_cpu_says_rss(tmp_path: Path) -> None:
    from tests.fake_runs import make_campaign as mk
    from tests.fake_runs import standard_gates, write_run

    camp = mk(tmp_path)
    write_run(camp, gates=standard_gates(None, None))
    assert main(["report", str(camp)]) == 0
    labels = "".join(ET.parse(camp / "report" / charts.MEMORY_SVG).getroot().itertext())
    assert "process RSS peak (host)" in labels and "GPU memory was not measured" in labels
    assert "torch peak" not in labels


def test_plan_svg_draws_the_plans_hours(gpu_campaign: Path) -> None:
    from cockpit import notebook as nbm
    from cockpit import plan as pl

    assert main(["report", str(gpu_campaign)]) == 0
    root = ET.parse(gpu_campaign / "report" / charts.PLAN_SVG).getroot()
    p = pl.build(nbm.load(gpu_campaign))
    n = len(p.packages)
    assert n == 3
    runs_w = _bar_widths(root, "plan-runs", n)
    reserve_w = _bar_widths(root, "plan-reserve", n)
    _proportional([k.used_h for k in p.packages] + [k.reserve_h for k in p.packages], runs_w + reserve_w)
    labels = "".join(root.itertext())
    for k in p.packages:
        assert f"{k.days} days" in labels and root.find(f".//{SVG}g[@id='plan-total-{k.days}']") is not None


def test_report_html_is_one_page_with_every_svg_inlined(gpu_campaign: Path) -> None:
    assert main(["report", str(gpu_campaign)]) == 0
    folder = gpu_campaign / "report"
    page = (folder / rp.HTML_FILE).read_text("utf-8")
    names = sorted(p.name for p in folder.glob("*.svg"))
    assert names == sorted([charts.LOSS_SVG, charts.QUALITY_SVG, charts.MEMORY_SVG, charts.TIME_SVG, charts.PLAN_SVG])
    for name in names:
        assert f'<figure data-src="{name}"><svg' in page  # inlined, not linked: the page travels alone
    assert page.count("<svg") == len(names)
    assert '<h2 id="runs">Runs</h2>' in page and "<table>" in page and "<pre>" in page
    ET.fromstring(page.split("<body>", 1)[1].rsplit("</body>", 1)[0].join(["<body>", "</body>"]).replace("&nbsp;", " "))
