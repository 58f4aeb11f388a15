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
