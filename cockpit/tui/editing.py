"""The application's notebook edits: the dialogs that write campaign.toml, and which actions a notebook that
cannot be read leaves on offer.

Apart from ``app.CockpitApp`` (which inherits it) so neither grows the other. An
action that needs the notebook (a pilot, a series, an edit) is hidden from the
footer while campaign.toml cannot be read: the screen says what is wrong, and a
key that cannot work is not offered (``check_action``).
"""

from __future__ import annotations

from pathlib import Path

from .. import notebook as nbm
from .notebookedits import Saved
from .toasts import ToastApp

# actions (the app's and the screens') that read or write the notebook: not offered while it cannot be read
NEED_NOTEBOOK = frozenset(
    {
        "start_pilot",
        "start_series",
        "compare",
        "note",
        "verdict",
        "conclusion",
        "selection",
        "variant",
        "resume_runs",
    }
)


def offered(app: object, action: str) -> bool:
    """Whether the footer offers ``action`` ("app.start_pilot", "note('decision')") in this app now."""
    name = action.removeprefix("app.").split("(", 1)[0]
    broken = bool(getattr(app, "notebook_error", ""))
    return not (broken and name in NEED_NOTEBOOK)


class EditingApp(ToastApp):
    notebook: nbm.Notebook
    notebook_path: Path
    notebook_error: str
    notebook_partial: bool
    notebook_decisions: int | None

    def reload_notebook(self, external: bool = False) -> None:
        raise NotImplementedError  # app.CockpitApp reads the file in a worker

    def need_notebook(self, what: str) -> bool:
        """True when ``what`` (an edit, a start) can use the notebook; else say why not."""
        if self.notebook_error:
            self.notify(
                f"{what}: campaign.toml cannot be read now. Fix the file; the view reloads by itself.\n"
                f"{self.notebook_error}",
                severity="error",
                timeout=15,
            )
            return False
        if self.notebook_partial:
            self.notify(
                f"{what}: campaign.toml is still being read ({self.notebook_decisions:,} decisions); "
                "try again in a moment",
                severity="warning",
            )
            return False
        return True

    def action_note(self, kind: str = "decision", run_id: str = "") -> None:
        from .screens.editdialogs import NoteScreen

        if self.need_notebook(f"add a {kind}"):
            self.push_screen(NoteScreen(kind, [run_id] if run_id else [], self.notebook.digest))

    def action_conclusion(self) -> None:
        from .screens.editdialogs import ConclusionScreen

        if self.need_notebook("edit the conclusion"):
            self.push_screen(ConclusionScreen(self.notebook.conclusion, [v.id for v in self.notebook.variants]))

    def action_selection(self) -> None:
        from .screens.editdialogs import SelectionScreen

        if self.need_notebook("edit the selection sheet"):
            self.push_screen(SelectionScreen(self.notebook.selection))

    def action_variant(self, variant_id: str = "") -> None:
        """Add a variant, or edit one (``variant_id``, else the reference): its set, differs, why and kind."""
        from .screens.variantdialog import VariantScreen

        if not self.need_notebook("edit a variant"):
            return
        ids = [v.id for v in self.notebook.variants]
        chosen = variant_id if variant_id in ids else self.notebook.reference.id
        self.push_screen(VariantScreen(list(self.notebook.variants), chosen))

    def set_verdict(self, run_id: str) -> None:
        from .screens.editdialogs import VerdictScreen

        if not self.need_notebook("set a verdict"):
            return
        try:
            seen = self.notebook.run(run_id).verdict
        except nbm.NotebookError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(VerdictScreen(run_id, seen))

    def saved(self, saved: Saved) -> None:
        """A dialog saved an edit: read the notebook again and say so."""
        self.reload_notebook()
        self.notify(saved.message, title="saved", severity="warning" if saved.merged else "information")
