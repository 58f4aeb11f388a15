"""One incremental reader per run, shared by every screen. No widgets here.

Each run that is followed (a running run in the campaign table, a run open in
a run screen) has one :class:`~cockpit.tui.ingest.RunFeed`: a byte offset into
its ``events.jsonl`` and the state folded so far. Its history is read once, in
a worker thread, when it is first wanted; the worker hands the feed over with
:class:`~cockpit.tui.messages.FeedLoaded` and from then on only the UI
thread touches it. The application's timer calls :meth:`Feeds.poll`, which
reads only new bytes, within a time budget shared by every feed, and tells the
screens what changed (:class:`~cockpit.tui.messages.FeedsChanged`). A run that
has ended costs one ``stat`` per tick; the readers of finished runs no screen
shows any more are dropped, oldest first, past ``keep_finished``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from .. import events as ev
from .. import runs
from .ingest import BUDGET_S, RunFeed
from .messages import FeedLoaded

CATCH_UP_S = 30.0  # a worker reads a run's history for at most this long before handing it over

ALL = "all"  # the aspect of a feed just loaded: draw everything


class Feeds:
    """The readers of the runs the screens follow, by run id."""

    def __init__(
        self,
        campaign_dir: Path,
        start_worker: Callable[[Callable[[], None], str], object],
        post: Callable[[FeedLoaded], object],
        budget_s: float = BUDGET_S,
        keep_finished: int = 8,
    ) -> None:
        self.campaign_dir = campaign_dir
        self._start_worker = start_worker  # (work, description): run ``work`` in a thread
        self._post = post  # thread-safe: hands a loaded feed to the UI thread
        self.budget_s = budget_s
        self.keep_finished = keep_finished
        self._feeds: OrderedDict[str, RunFeed] = OrderedDict()
        self.last_lines = 0  # lines the last poll read, all feeds together
        self.behind = False  # whether the last poll left bytes unread (its budget ran out)
        self._loading: set[str] = set()

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._feeds or run_id in self._loading

    def get(self, run_id: str) -> RunFeed | None:
        return self._feeds.get(run_id)

    def loading(self, run_id: str) -> bool:
        return run_id in self._loading

    @property
    def ids(self) -> list[str]:
        return list(self._feeds)

    def want(self, run_id: str) -> RunFeed | None:
        """The run's reader if its history is read; else start reading it (once) and return None."""
        feed = self._feeds.get(run_id)
        if feed is not None:
            self._feeds.move_to_end(run_id)  # recently wanted: dropped last
            return feed
        if run_id not in self._loading:
            self._loading.add(run_id)
            path = runs.run_dir(self.campaign_dir, run_id) / ev.EVENTS_FILE
            self._start_worker(lambda: self._load(run_id, path), f"read the events of {run_id}")
        return None

    def _load(self, run_id: str, path: Path) -> None:
        """In a worker thread: read the history (samples decimated while far behind), then hand it over."""
        feed = RunFeed(path)
        feed.catch_up(CATCH_UP_S)
        self._post(FeedLoaded(run_id, feed))

    def loaded(self, message: FeedLoaded) -> None:
        """On the UI thread: the feed is ours from now on."""
        self._loading.discard(message.run_id)
        self._feeds[message.run_id] = message.feed
        self._trim()

    def poll(self, keep: set[str] | frozenset[str] = frozenset()) -> dict[str, set[str]]:
        """Read new events of every feed within the shared budget; run id -> what changed."""
        changed: dict[str, set[str]] = {}
        deadline = time.perf_counter() + self.budget_s
        self.last_lines, self.behind = 0, False
        for run_id, feed in list(self._feeds.items()):
            left = deadline - time.perf_counter()
            if left <= 0:
                self.behind = True
                break  # the others are read at the next tick (the oldest first: they move to the end)
            budget, feed.budget_s = feed.budget_s, left
            before = feed.lines_read
            try:
                dirty = feed.poll()
            finally:
                feed.budget_s = budget
            self.last_lines += feed.lines_read - before
            self.behind = self.behind or feed.behind_bytes > 0
            if dirty:
                changed[run_id] = dirty
                self._feeds.move_to_end(run_id)
        self._trim(keep)
        return changed

    def _trim(self, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """Drop the readers of finished runs nobody looks at, past ``keep_finished``."""
        finished = [rid for rid, f in self._feeds.items() if (f.end is not None or f.gone) and rid not in keep]
        for rid in finished[: max(0, len(finished) - self.keep_finished)]:
            del self._feeds[rid]
