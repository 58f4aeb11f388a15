"""Issue 14, item 2: links are never followed out of a folder.

``cockpit archive`` copies only the run's own regular files (a linked artifact
refuses the archive; a linked metrics file is left out and listed under
``links``), never lists an outside file with its SHA-256 as the run's own;
``archive --verify`` refuses manifest paths that leave the archive and links
inside it; ``cockpit report`` never writes through a linked ``report/``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cockpit import archive as ar
from cockpit import fsutil, runs
from cockpit.cli import main as cli
from cockpit.errors import CockpitError
from tests.fake_runs import make_campaign, write_run

SECRET = b"outside the run: never to be archived " * 64


def exported_run(root: Path) -> tuple[Path, Path, Path]:
    """A campaign with one passed pilot that exported an artifact (real torch files), and a file outside it."""
    camp = make_campaign(root)
    _, rdir = write_run(camp)
    art = rdir / "artifact"
    art.mkdir()
    torch.save({"w": torch.arange(6.0)}, art / "model.pt")
    torch.save({"ids": ["a"], "loss": 1.0}, art / "control.pt")
    files = {n: {"sha256": fsutil.sha256(art / n), "bytes": (art / n).stat().st_size} for n in ("model.pt",)}
    (art / "manifest.json").write_text(json.dumps({"files": files}))
    (rdir / "output.log").write_text("log\n")
    (rdir / "curve.csv").write_text("step,loss\n1,2.0\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(SECRET)
    torch.save({"w": torch.zeros(3)}, outside / "model.pt")
    return camp, rdir, outside


def _swap_for_link(path: Path, target: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def _no_secret_in(folder: Path) -> bool:
    return not any(p.is_file() and not p.is_symlink() and SECRET[:40] in p.read_bytes() for p in folder.rglob("*"))


CASES: list[tuple[str, Callable[[Path, Path], None], str]] = [
    ("model.pt links out", lambda r, o: _swap_for_link(r / "artifact" / "model.pt", o / "model.pt"), "refused"),
    ("control.pt links out", lambda r, o: _swap_for_link(r / "artifact" / "control.pt", o / "secret.bin"), "refused"),
    ("artifact/ links out", lambda r, o: _swap_for_link(r / "artifact", o), "refused"),
    ("manifest links out", lambda r, o: _swap_for_link(r / "artifact" / "manifest.json", o / "secret.bin"), "refused"),
    ("events.jsonl links out", lambda r, o: _swap_for_link(r / "events.jsonl", o / "secret.bin"), "recorded"),
    ("output.log links out", lambda r, o: _swap_for_link(r / "output.log", o / "secret.bin"), "recorded"),
    ("a csv links out", lambda r, o: _swap_for_link(r / "evals.csv", o / "secret.bin"), "recorded"),
    ("metrics.json links out", lambda r, o: _swap_for_link(r / "metrics.json", o / "secret.bin"), "recorded"),
]


@pytest.mark.parametrize("what,plant,expect", CASES, ids=[c[0] for c in CASES])
def test_archive_never_copies_through_a_link(
    tmp_path: Path, what: str, plant: Callable[[Path, Path], None], expect: str
) -> None:
    camp, rdir, outside = exported_run(tmp_path)
    plant(rdir, outside)
    out = tmp_path / "arch"
    if expect == "refused":
        with pytest.raises(ar.ArchiveError, match="symbolic link"):
            ar.gather(rdir, out)
        assert not out.exists()
        return
    target = ar.gather(rdir, out)
    manifest = json.loads((target / "manifest.json").read_text())
    assert _no_secret_in(target), what
    assert any("symbolic link" in v for v in manifest["links"].values()), manifest.get("links")
    for name in manifest["files"]:  # nothing listed as the run's own comes from outside
        assert not (target / name).is_symlink()
    assert ar.verify(target).ok, ar.verify(target).problems


def test_archive_of_a_run_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    camp, rdir, outside = exported_run(tmp_path)
    link = tmp_path / "linked-run"
    link.symlink_to(rdir)
    with pytest.raises(ar.ArchiveError, match="symbolic link"):
        ar.gather(link, tmp_path / "arch")


def test_archive_refuses_an_export_manifest_naming_files_outside(tmp_path: Path) -> None:
    camp, rdir, outside = exported_run(tmp_path)
    (rdir / "artifact" / "manifest.json").write_text(json.dumps({"files": {"../../../outside/secret.bin": {}}}))
    with pytest.raises(ar.ArchiveError, match="not a file of the artifact folder"):
        ar.gather(rdir, tmp_path / "arch")


def test_archive_does_not_write_through_a_linked_report_folder(tmp_path: Path) -> None:
    camp, rdir, outside = exported_run(tmp_path)
    (camp / "report").symlink_to(outside)
    with pytest.raises(ar.ArchiveError, match="symbolic link"):
        ar.gather(rdir)
    assert sorted(p.name for p in outside.iterdir()) == ["model.pt", "secret.bin"]


@pytest.fixture
def archived(tmp_path: Path) -> tuple[Path, Path]:
    camp, rdir, outside = exported_run(tmp_path)
    return ar.gather(rdir, tmp_path / "arch"), outside


def _rewrite(folder: Path, change: Callable[[dict], None]) -> None:
    m = json.loads((folder / "manifest.json").read_text())
    change(m)
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    "name",
    ["../outside/secret.bin", "model/../../outside/secret.bin", "/etc/hostname", "model//model.pt", "./README.md"],
)
def test_verify_refuses_paths_that_leave_the_archive(archived: tuple[Path, Path], name: str) -> None:
    folder, outside = archived
    real = os.path.normpath(str(folder / name)) if not name.startswith("/") else name
    digest = fsutil.sha256(real) if os.path.isfile(real) else "0" * 64
    _rewrite(folder, lambda m: m["files"].__setitem__(name, {"sha256": digest, "bytes": 1}))
    v = ar.verify(folder)
    assert not v.ok and any("leaves the archive" in p for p in v.problems), v.problems
    assert v.state is None  # nothing was loaded


def test_verify_refuses_a_link_inside_the_archive_even_with_the_right_hash(archived: tuple[Path, Path]) -> None:
    folder, outside = archived
    (folder / "model" / "model.pt").unlink()
    (folder / "model" / "model.pt").symlink_to(outside / "model.pt")
    _rewrite(folder, lambda m: m["files"]["model/model.pt"].__setitem__("sha256", fsutil.sha256(outside / "model.pt")))
    v = ar.verify(folder)
    assert not v.ok and any("symbolic link" in p for p in v.problems), v.problems
    assert v.state is None


def test_verify_refuses_a_linked_folder_inside_the_archive(archived: tuple[Path, Path]) -> None:
    folder, outside = archived
    (folder / "extra").symlink_to(outside)
    v = ar.verify(folder)
    assert not v.ok and any("extra: a symbolic link" in p for p in v.problems), v.problems


def test_verify_does_not_hang_on_a_fifo(archived: tuple[Path, Path]) -> None:
    folder, outside = archived
    (folder / "model" / "model.pt").unlink()
    os.mkfifo(folder / "model" / "model.pt")
    v = ar.verify(folder)
    assert not v.ok and any("not a regular file" in p for p in v.problems), v.problems


def test_verify_says_verified_for_a_clean_archive(archived: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    folder, _ = archived
    assert cli(["archive", "--verify", str(folder)]) == 0
    assert "verified" in capsys.readouterr().out


def test_report_never_writes_through_a_linked_report_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    camp = make_campaign(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (camp / "report").symlink_to(outside)
    assert cli(["report", str(camp)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "Traceback" not in err
    assert list(outside.iterdir()) == []
    from cockpit import report

    with pytest.raises(CockpitError):
        report.write(camp)


def test_report_is_written_atomically_and_replaces_a_linked_report_file(tmp_path: Path) -> None:
    camp = make_campaign(tmp_path)
    outside = tmp_path / "outside.md"
    outside.write_text("keep me")
    (camp / "report").mkdir()
    (camp / "report" / "report.md").symlink_to(outside)
    assert cli(["report", str(camp)]) == 0
    assert outside.read_text() == "keep me"  # the link was replaced, not written through
    assert not (camp / "report" / "report.md").is_symlink()
    assert not list((camp / "report").glob(".*.tmp"))


def test_run_files_that_are_links_are_not_read(tmp_path: Path) -> None:
    camp, rdir, outside = exported_run(tmp_path)
    (outside / "metrics.json").write_text(json.dumps({"final_val_loss": 1.0}))
    _swap_for_link(rdir / "metrics.json", outside / "metrics.json")
    _swap_for_link(rdir / "inspect.json", outside / "metrics.json")
    assert runs.read_metrics(rdir) == {} and runs.read_inspect(rdir) == {}
    _swap_for_link(rdir / "events.jsonl", outside / "secret.bin")
    s = runs.summary(rdir)
    assert s.refused and s.total == 0
