"""``cockpit inspect RUN_DIR`` or ``cockpit inspect CAMPAIGN [RUN_ID]``: what reaches the loss.

Prints the examples the data gate recorded in the run's ``inspect.json``,
exactly as the loss received them: the decoded text with the supervised spans
highlighted and the masked spans dimmed, the target (and its label name for a
classifier), then every row of the batch position by position (input ids,
attention mask, labels with ignored positions dimmed). Also the class counts
per split, what cropping to max_length cost, and the data gate's failed
checks. No torch.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import events as ev
from .. import fsutil, runs, styles
from .. import inspectview as iv
from .. import notebook as nbm
from ..errors import CockpitError, UsageError
from ..inspectview import IGNORE, MASKED, SUPERVISED
from ..schema import JSON, JSONObject

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        default="campaigns/demo",
        help="a run folder, or a campaign folder (then RUN_ID, default: its latest inspected run)",
    )
    p.add_argument("run_id", nargs="?", help="run id within the campaign, e.g. r0003")
    p.add_argument("--split", help="only the examples of this split")
    p.add_argument("--id", dest="example_id", help="only this example")
    p.add_argument("--json", action="store_true", help="print the inspect.json document")


def resolve(target: str, run_id: str | None) -> Path:
    """The run folder named by RUN_DIR, or by CAMPAIGN and RUN_ID (default: the latest run with inspect.json)."""
    path = Path(target)
    if (path / runs.RUN_FILE).is_file() or (path / runs.INSPECT_FILE).is_file():
        if run_id:
            raise UsageError(f"{path} is a run folder already; drop {run_id!r}, or pass the campaign folder")
        return path
    try:
        nb_path = nbm.find(path)
    except CockpitError as exc:
        raise UsageError(f"{target}: neither a run folder (no {runs.RUN_FILE}) nor a campaign ({exc})") from None
    campaign_dir = nb_path.parent
    if run_id:
        try:
            rdir = runs.run_dir(campaign_dir, run_id)
        except runs.BadRunId as exc:
            raise UsageError(f"{exc}; `cockpit runs {campaign_dir}` lists the runs.") from None
        if not rdir.is_dir() or rdir.is_symlink():
            have = sorted(p.name for p in runs.runs_dir(campaign_dir).glob("r*") if p.is_dir())
            raise UsageError(
                f"{campaign_dir}: no run {run_id!r}"
                + (f"; runs: {', '.join(have[-8:])}" if have else "; start one with `cockpit pilot`")
            )
        return rdir
    inspected = [p for p in runs.run_dirs(campaign_dir) if fsutil.is_regular(p / runs.INSPECT_FILE)]
    if not inspected:
        raise UsageError(
            f"{campaign_dir}: no run has inspected examples yet; `cockpit pilot {target}` records them in its data gate"
        )
    return inspected[-1]


def load(rdir: Path) -> JSONObject:
    """inspect.json as the data gate wrote it (any JSON object with an ``examples`` list; each field is checked
    where it is shown)."""
    path = rdir / runs.INSPECT_FILE
    try:
        doc = json.loads(fsutil.read_regular(path, runs.MAX_SMALL_FILE))
    except FileNotFoundError:
        raise UsageError(
            f"{path}: not written; the data gate writes it, and this run did not reach or finish "
            "that gate (see `cockpit runs`)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}; not read") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}); the pilot may still be writing it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("examples"), list):
        raise UsageError(f"{path}: no 'examples' list in it")
    return doc


def data_gate(rdir: Path) -> ev.Event | None:
    gates = [g for g in ev.gates(runs.summary(rdir).events) if g.get("phase") == "data"]
    return gates[-1] if gates else None


def text_of(example: Mapping[str, object]) -> Text:
    """The decoded text as rich Text: supervised spans highlighted, masked spans dimmed."""
    return iv.text_of(example, iv.CLI)


def positions(row: Mapping[str, object], width: int) -> list[Table]:
    """The batch row position by position, in blocks that fit ``width`` columns."""
    return iv.positions(row, width, iv.CLI)


def _object(x: JSON) -> JSONObject:
    return x if isinstance(x, Mapping) else {}


def render(doc: JSONObject, rdir: Path, gate: ev.Event | None, split: str | None, only: str | None) -> None:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from ..termout import console as termout_console

    console = termout_console()
    listed = doc.get("examples")
    examples = [
        e
        for e in (listed if isinstance(listed, list) else [])
        if isinstance(e, Mapping)
        and (split is None or e.get("split") == split)
        and (only is None or str(e.get("id")) == only)
    ]
    head = Text(f"{rdir}: {len(examples)} examples as the loss receives them", style="bold")
    head.append("\n")
    head.append("supervised", style=SUPERVISED)
    head.append(" spans count in the loss; ")
    head.append("dimmed", style=MASKED)
    head.append(
        f" spans and labels {IGNORE} are ignored; examples were collated in microbatches of the run's size, "
        "so padding is what training sees"
    )
    console.print(head)
    if gate is not None:
        style = styles.verdict_style(str(gate.get("verdict")))
        console.print(Text.assemble(("data gate: ", "bold"), (str(gate.get("verdict")), style)))
        for c in gate.get("checks", []):
            if not c.get("ok"):
                console.print(
                    Text.assemble(
                        ("  warn " if c.get("warn") else "  fail ", "yellow" if c.get("warn") else "red"),
                        (str(c.get("name", "")), "bold"),
                        ": ",
                        str(c.get("detail", "")),
                    ),
                    overflow="fold",
                )
        trunc = gate.get("truncation")
        if isinstance(trunc, dict):
            console.print(
                Text(
                    f"cropping to max_length {trunc.get('max_length')}: {trunc.get('lose_target_tokens')} of "
                    f"{trunc.get('examples')} train examples lose target tokens, "
                    f"{trunc.get('no_target_left')} keep none"
                ),
                highlight=False,
            )
    counts = {s: c for s, c in _object(doc.get("class_counts")).items() if isinstance(c, Mapping)}
    if counts and len(counts) == len(_object(doc.get("class_counts"))):
        label_names = doc.get("label_names")
        names = [
            str(n)
            for n in (label_names if isinstance(label_names, list) else [])
            or sorted({str(k) for c in counts.values() for k in c})
        ]
        tab = Table(title="class counts", title_justify="left")
        tab.add_column("id", justify="right")
        tab.add_column("label")
        for s in counts:
            tab.add_column(Text(str(s)), justify="right")
        extra = sorted({str(k) for c in counts.values() for k in c} - set(names))
        for i, name in enumerate([*names, *extra]):
            tab.add_row(
                str(i) if i < len(names) else "?", Text(name), *(Text(str(counts[s].get(name, 0))) for s in counts)
            )
        console.print(tab)
    if not examples:
        console.print(Text("no example matches", style="yellow"))
    width = max(40, console.width - 4)
    for e in examples:
        body: list[RenderableType] = [Text.assemble(("text   ", "bold"), text_of(e))]
        if e.get("target") is not None:
            body.append(Text.assemble(("target ", "bold"), (str(e["target"]), "green")))
        if e.get("generated") is not None:  # what the model generated from the prompt, after the pilot's updates
            at = f" (after update {e['generated_step']})" if e.get("generated_step") is not None else ""
            body.append(Text.assemble(("generated ", "bold"), str(e["generated"]), (at, "dim")))
        if e.get("label_name") is not None:
            body.append(Text.assemble(("label  ", "bold"), str(e["label_name"])))
        row = _object(e.get("row"))
        scalars = {k: v for k, v in row.items() if not isinstance(v, list)}
        for k, v in scalars.items():
            body.append(Text.assemble((f"{k} ", "bold"), str(v)))
        body.extend(positions(row, width - 4))
        title = Text(f"{e.get('split', '?')} {e.get('id', '?')}")  # the task's ids: never read as markup
        console.print(Panel(Group(*body), title=title, title_align="left"))


def run(args: argparse.Namespace) -> int:
    rdir = resolve(args.target, args.run_id)
    doc = load(rdir)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    render(doc, rdir, data_gate(rdir), args.split, args.example_id)
    return 0
