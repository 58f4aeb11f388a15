"""The task's splits as Cockpit reads them: any indexable sequence of dict examples, taken as it is.

A split may be a list, a Hugging Face ``datasets.Dataset`` (whose slices are
dicts of columns, not lists of rows), or anything with ``len`` and ``[i]``.
:class:`Split` reads rows one index at a time, so every form works without a
conversion. Examples without an ``"id"`` are named by split and position
(``"train[17]"``): the id is added to a copy of the row, never to the user's data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from ..contract import Example
from ..schema import JSON
from .usercode import UserCodeError


class Split(Sequence[Example]):
    def __init__(self, name: str, data: Any):
        if not hasattr(data, "__len__") or not hasattr(data, "__getitem__"):
            raise UserCodeError(
                "datasets",
                TypeError(
                    f"split {name!r} is a {type(data).__name__}: give a sequence of examples (a list, a Hugging Face "
                    "Dataset, anything with len() and [i])"
                ),
            )
        self.name, self.data = name, data
        self.named_by_position = False
        n = len(data)
        if n:
            first = self._raw(0)
            if not isinstance(first, Mapping):
                raise UserCodeError(
                    "datasets",
                    TypeError(
                        f"split {name!r}: its first example is a {type(first).__name__}, not a dict: each example "
                        "must be a dict of its fields by name ({'x': ..., 'label': ...}); a torch Dataset whose "
                        "__getitem__ returns (x, y) can return {'x': x, 'y': y} instead"
                    ),
                )
            ident = first.get("id")
            if ident is not None and not isinstance(ident, (str, int)) and not _scalar(ident):
                raise UserCodeError(
                    "datasets",
                    TypeError(
                        f"split {name!r}: its first example's id is a {type(ident).__name__}: an id must be a string "
                        "or a whole number, unique across the splits"
                    ),
                )
            self.named_by_position = ident in (None, "")

    def _raw(self, i: int) -> Any:
        return self.data[i]

    def __len__(self) -> int:
        return len(self.data)

    @overload
    def __getitem__(self, i: int) -> Example: ...

    @overload
    def __getitem__(self, i: slice) -> list[Example]: ...

    def __getitem__(self, i: int | slice) -> Example | list[Example]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        row = self._raw(i)
        if self.named_by_position and isinstance(row, Mapping) and row.get("id") in (None, ""):
            return {**row, "id": f"{self.name}[{i}]"}
        return row if isinstance(row, dict) else dict(row) if isinstance(row, Mapping) else row

    def __iter__(self) -> Iterator[Example]:
        for i in range(len(self)):
            yield self[i]


def _scalar(value: Any) -> bool:
    """A numpy or torch scalar (an id read from pandas or a tensor column): hashable by its value."""
    return getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None))


def load(raw: Any) -> dict[str, Split]:
    """The task's ``datasets(params)`` result, every split wrapped."""
    if not isinstance(raw, Mapping):
        raise UserCodeError(
            "datasets",
            TypeError(
                f"returned a {type(raw).__name__}: return a dict of splits, {{'train': ..., 'val': ...}} "
                "(a Hugging Face DatasetDict works too)"
            ),
        )
    return {str(k): v if isinstance(v, Split) else Split(str(k), v) for k, v in raw.items()}


def torch_uint8() -> Any:
    import torch

    return torch.uint8


def _feed(h: Any, value: Any) -> None:
    """Hash a value by its content: tensors and arrays by their bytes, containers item by item."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().contiguous()
        h.update(f"tensor{tuple(value.shape)}{value.dtype}".encode())
        h.update(value.view(-1).view(torch_uint8()).numpy().tobytes() if value.numel() else b"")
        return
    if hasattr(value, "tobytes") and hasattr(value, "shape"):  # a numpy array
        h.update(f"array{tuple(value.shape)}{value.dtype}".encode())
        h.update(value.tobytes())
        return
    if isinstance(value, Mapping):
        h.update(b"{")
        for k in sorted(value, key=str):
            h.update(str(k).encode() + b":")
            _feed(h, value[k])
        h.update(b"}")
        return
    if isinstance(value, (list, tuple)):
        h.update(b"[")
        for x in value:
            _feed(h, x)
        h.update(b"]")
        return
    h.update(repr(value).encode())


def data_revision(splits: Mapping[str, Sequence[Example]], limit: int = 2_000_000) -> dict[str, JSON]:
    """A revision of the data as the task produced it: a SHA-256 over every example's id and content, per split.

    Two runs trained on the same revision saw the same examples; a dataset that changed
    between a pilot and a series, or between two series, shows as another revision.
    """
    import hashlib

    total = hashlib.sha256()
    counts: dict[str, int] = {}
    for name in sorted(splits):
        data = splits[name]
        n = min(len(data), limit)
        h = hashlib.sha256()
        for i in range(n):
            _feed(h, data[i])
        counts[name] = len(data)
        total.update(name.encode() + b"=" + h.hexdigest().encode())
    return {
        "sha256": total.hexdigest(),
        "examples": counts,
        **({"hashed_first": limit} if any(c > limit for c in counts.values()) else {}),
    }
