"""A series' plan: which variant x seed items to run, parsed from the command line or the TUI. No torch.

The plan is made before anything starts, so the same list is shown, run and recorded;
nothing here refuses (:func:`cockpit.series.checks.guard` vets the plan), so a preview can
always be shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .. import events as ev
from .. import launch, runs
from .. import notebook as nbm
from ..errors import UsageError
from ..notebook.settings import Settings, SettingValue
from ..runs import stored


@dataclass(frozen=True, eq=False)  # eq: a Mapping's, so that it equals the dict of the same changes
class Overrides(Mapping[str, SettingValue]):
    """The settings a series changes on top of each variant's: ``--set`` values and a budget override (``--updates``:
    the other two budgets set to None, unset). Written into each new run's frozen parameters, so a quick look is
    never mistaken for the campaign's budget. A read-only mapping of setting to value."""

    changes: Mapping[str, SettingValue] = field(default_factory=dict)

    def __getitem__(self, key: str) -> SettingValue:
        return self.changes[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    @property
    def updates(self) -> int | None:
        """The number of updates these overrides set the budget to, if they set it."""
        u = self.changes.get("updates")
        return int(u) if isinstance(u, (int, float)) and u else None

    def on(self, settings: Settings) -> Settings:
        """A variant's settings with these on top, the unset ones left out: what a new run freezes."""
        return settings.with_(self.changes).given()

    def flat(self) -> dict[str, SettingValue]:
        """A copy, for :func:`cockpit.launch.new_run`."""
        return dict(self.changes)


@dataclass
class Item:
    variant: str
    seed: int
    follows: str = ""
    overrides: Overrides = field(default_factory=Overrides)
    resume: str = ""  # an existing run to go on with from its newest checkpoint, instead of a new run
    notes: str = ""  # written into the new run's row (an override, a deliberate repeat)
    attach: str = ""  # a run still going on that an earlier series' keeper holds: followed, nothing started

    def label(self) -> str:
        if self.attach:
            return f"{self.variant} seed {self.seed}: follow {self.attach}, still running on the Ray cluster"
        if self.resume:
            return f"{self.variant} seed {self.seed}: resume {self.resume}"
        return f"{self.variant} seed {self.seed}" + (f" (follows {self.follows})" if self.follows else "")


def resumable(nb: nbm.Notebook, ids: list[str] | None = None) -> list[Item]:
    """Training runs that ended from outside (stopped, crashed) with a periodic checkpoint to go on from, and that
    no newer run follows."""
    out = []
    # A run that a newer run follows was started again already (`--skip-done`, `--rerun`): resuming it too would
    # train its variant and seed twice.
    followed = {r.follows: r.id for r in nb.runs if r.follows}
    for row in runs.view(nb):
        if row.kind != "train" or (ids and row.id not in ids):
            continue
        rdir = runs.run_dir(nb.directory, row.id)
        has = bool(stored.checkpoint_steps(rdir))  # in its folder, or in [cluster] storage
        if row.id in followed:
            if ids:
                raise UsageError(
                    f"{row.id} cannot be resumed: {followed[row.id]} follows it (its variant and seed were started "
                    f"again); resume {followed[row.id]} instead if it stopped"
                )
            continue
        if row.status in launch.RESUMABLE and has:
            out.append(Item(row.variant, row.seed, resume=row.id))
        elif ids:
            why = f"it is {row.status}" if row.status not in launch.RESUMABLE else "it wrote no periodic checkpoint"
            raise UsageError(f"{row.id} cannot be resumed: {why} ({row.stop_reason or 'no reason recorded'})")
    missing = set(ids or []) - {i.resume for i in out}
    if missing:
        raise UsageError(f"no training run {', '.join(sorted(missing))} in {nb.path}; `cockpit runs` lists them")
    return out


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-4"`` (inclusive) or a mix: ``"0-2,7"``."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        a, dash, b = part.partition("-")
        try:
            if dash and a:
                lo, hi = int(a), int(b)
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UsageError(f"--seeds {text!r}: write seeds as 0,1,2 or a range 0-4") from None
    if not out:
        raise UsageError("--seeds: give at least one seed, e.g. --seeds 0,1,2")
    if len(set(out)) != len(out):
        raise UsageError(f"--seeds {text!r} names a seed twice")
    return out


def budget_overrides(updates: int | None) -> Overrides:
    """Replace the notebook's budget by a number of updates (a quick look); recorded in run.toml."""
    if updates is None:
        return Overrides()
    if updates < 1:
        raise UsageError(f"--updates {updates}: give a whole number >= 1")
    return Overrides({"updates": int(updates), "epochs": None, "examples": None})


def default_variants(nb: nbm.Notebook) -> list[str]:
    """The quality variants (memory variants are compared by their pilots); all if none is marked."""
    return nb.series_variants()


def _latest_train(nb: nbm.Notebook, variant: str, seed: int) -> nbm.RunRow | None:
    rows = [r for r in nb.runs if r.kind == "train" and r.variant == variant and r.seed == seed]
    return max(rows, key=lambda r: runs.order_key(r.id)) if rows else None


def intended_params(nb: nbm.Notebook, variant: str, overrides: Mapping[str, SettingValue]) -> Settings:
    """The settings a new run of the variant freezes: the variant's with the overrides on top, unset ones left out."""
    return Overrides(overrides).on(Settings.of(nb, variant))


def plan(
    nb: nbm.Notebook,
    variants: list[str] | None = None,
    seeds: list[int] | None = None,
    *,
    overrides: Mapping[str, SettingValue] | None = None,
    skip_done: bool = False,
    rerun: list[str] | None = None,
) -> tuple[list[Item], list[str]]:
    """The items to run, in order, and notes on what was skipped or followed.

    Nothing here refuses: :func:`cockpit.series.checks.guard` vets the plan before anything starts (the CLI and the
    TUI call it), so a preview can always be shown.
    """
    return _items(nb, variants, seeds, overrides=overrides, skip_done=skip_done, rerun=rerun)


def _items(
    nb: nbm.Notebook,
    variants: list[str] | None,
    seeds: list[int] | None,
    *,
    overrides: Mapping[str, SettingValue] | None,
    skip_done: bool,
    rerun: list[str] | None,
) -> tuple[list[Item], list[str]]:
    changes = Overrides(dict(overrides or {}))
    notes: list[str] = []
    items: list[Item] = []
    if rerun:
        for rid in rerun:
            row = nb.run(rid)
            items.append(Item(row.variant, row.seed, follows=row.id, overrides=changes))
        if variants is None and seeds is None:
            return items, notes
    chosen = variants or default_variants(nb)
    for vid in chosen:
        nb.variant(vid)  # a clear error for an unknown id
    live = {r.id: r.status for r in runs.view(nb) if r.status in _IN_FLIGHT} if skip_done else {}
    for vid in chosen:
        for seed in seeds if seeds is not None else [0, 1, 2]:
            prev = _latest_train(nb, vid, seed)
            if prev is not None and prev.id in live:
                # A series whose own process was killed leaves its runs going on detached: starting what is left
                # again must not train the same variant and seed twice at once.
                how = "is still running" if live[prev.id] == ev.Status.RUNNING.value else "was created, not started yet"
                notes.append(f"{vid} seed {seed}: skipped, {prev.id} {how}")
                continue
            if skip_done and prev is not None and prev.status == ev.Status.COMPLETED.value:
                same = _same_params(nb, prev.id, changes.on(Settings.of(nb, vid)))
                if same:
                    notes.append(f"{vid} seed {seed}: skipped, {prev.id} completed with the same settings")
                    continue
            items.append(Item(vid, seed, follows=prev.id if prev is not None else "", overrides=changes))
    return items, notes


_IN_FLIGHT = (ev.Status.CREATED.value, ev.Status.RUNNING.value)  # what the run folder says, not the row


def _same_params(nb: nbm.Notebook, rid: str, want: Settings) -> bool:
    try:
        got = runs.read_run_toml(runs.run_dir(nb.directory, rid)).get("params", {})
    except (FileNotFoundError, OSError):
        return False
    return got == want.params
