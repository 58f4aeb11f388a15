"""Reading ``campaign.toml``: TOML into the typed model, with every problem collected in one message.

Each problem names the file and the TOML line (syntax) or the key path (types
and values), and what to do; ``check.py`` holds the value checks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib as tomllib  # re-exported: the one TOML reader for Python 3.10 and 3.11+
else:  # pragma: no cover
    import tomli as tomllib

from .check import check_values, suggest
from .model import (
    CAMPAIGN_KINDS,
    NOTEBOOK_FILE,
    PROBE_OPTIONAL,
    REQUIRED_SECTIONS,
    SECTIONS,
    Notebook,
    NotebookError,
    probe_campaign_sections,
)

MAX_NOTEBOOK_BYTES = 256 << 20  # a notebook with 200,000 decisions is about 30 MB


def resolve(path: Path | str) -> Path:
    """A campaign as the user named it: a path, or a bare name that is not here but is under ``campaigns/``."""
    p = Path(path)
    if not p.exists() and len(p.parts) == 1 and (Path("campaigns") / p / NOTEBOOK_FILE).is_file():
        return Path("campaigns") / p  # `cockpit new x && cockpit pilot x`: x is campaigns/x
    return p


def find(path: Path | str) -> Path:
    """Accept a campaign folder or its campaign.toml; a bare name is looked for here, then in ``campaigns/``."""
    p = resolve(path)
    if p.is_dir() and p.name != NOTEBOOK_FILE:
        p = p / NOTEBOOK_FILE
    if p.is_dir():
        raise NotebookError(
            f"{p}: is a folder, not a campaign notebook. {NOTEBOOK_FILE} must be a TOML file: move that "
            f"folder away and write the notebook there (or create one with `cockpit new NAME`)."
        )
    if not p.exists():
        if p.parent.name == "demo" and p.parent.parent.name == "campaigns":
            raise NotebookError(
                f"{p}: the demo campaign is not here yet; make it with `cockpit new demo --example demo` "
                "(./setup.sh makes it in a clone), then run the command again."
            )
        raise NotebookError(
            f"{p}: no campaign notebook here. Give a campaign folder holding {NOTEBOOK_FILE} "
            f"(for example campaigns/demo), or create one with `cockpit new NAME`."
        )
    return p


def read_bytes(p: Path) -> bytes:
    """The notebook's bytes; every way the file can be unreadable becomes a NotebookError naming it."""
    from .. import fsutil

    try:
        return fsutil.read_regular(p, MAX_NOTEBOOK_BYTES, follow=True)
    except fsutil.NotAFile as exc:
        raise NotebookError(
            f"{p}: {exc.strerror}; a campaign notebook must be a TOML file. Replace it with one "
            f"(`cockpit new NAME` writes a template)."
        ) from None
    except fsutil.TooLarge:
        raise NotebookError(
            f"{p}: larger than {MAX_NOTEBOOK_BYTES >> 20} MiB; this is not a campaign notebook Cockpit wrote. "
            "Check that the path names the right file."
        ) from None
    except PermissionError:
        raise NotebookError(
            f"{p}: permission denied; make the notebook readable by this user (chmod u+r) and run the command again."
        ) from None
    except FileNotFoundError:
        raise NotebookError(
            f"{p}: the campaign notebook disappeared while being read; run the command again."
        ) from None
    except OSError as exc:
        raise NotebookError(f"{p}: cannot be read ({exc.strerror or exc}); check the disk and the file.") from None


def load(path: Path | str) -> Notebook:
    p = find(path)
    raw = read_bytes(p)
    digest = hashlib.sha256(raw).hexdigest()
    data = _cached(p, digest) if len(raw) >= CACHE_MIN_BYTES else None
    nb = from_data(data, p) if data is not None else parse(raw, p)
    nb.path = p
    nb.digest = digest
    return nb


CACHE_FILE = ".campaign.cache.json"  # written by store.save for large notebooks; see there
CACHE_MIN_BYTES = 1 << 20


def _cached(p: Path, digest: str) -> dict[str, object] | None:
    """The values of the notebook as its last save wrote them, when the file is still exactly that one."""
    import json

    from .. import fsutil

    try:
        blob = json.loads(fsutil.read_regular(p.parent / CACHE_FILE, MAX_NOTEBOOK_BYTES * 2))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(blob, dict) or blob.get("format") != 1 or blob.get("sha256") != digest:
        return None
    data = blob.get("data")
    return data if isinstance(data, dict) else None


def parse(raw: bytes | str, where: Path | str = NOTEBOOK_FILE) -> Notebook:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            kind = "a binary file" if b"\0" in raw[:8192] else "not UTF-8 text"
            raise NotebookError(
                f"{where}: {kind}: the byte at offset {exc.start} (line {line}) is not valid UTF-8. "
                "A campaign notebook is TOML text in UTF-8: save it as UTF-8, or check that the path names "
                f"the right file, then run `cockpit check {Path(where).parent}`."
            ) from None
    else:
        text = raw
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotebookError(_syntax_message(where, text, exc)) from None
    except RecursionError:
        raise NotebookError(
            f"{where}: arrays or tables nested too deeply for a campaign notebook; no section of it nests "
            f"more than two levels. Fix the file, then run `cockpit check {Path(where).parent}`."
        ) from None
    if not data:
        raise NotebookError(
            f"{where}: empty: no section in it. A campaign notebook needs at least [campaign], [task], [batch], "
            "[training] and one [[variants]]; `cockpit new NAME` writes a complete template to start from."
        )
    return from_data(data, where)


def from_data(data: Mapping[str, object], where: Path | str = NOTEBOOK_FILE) -> Notebook:
    """The notebook from parsed TOML (or from an edited notebook's ``to_dict``), every problem in one message."""
    problems: list[str] = []
    nb = _build_notebook(data, problems)
    if nb is not None:
        typed = not problems
        try:
            check_values(nb, problems)
        except (TypeError, AttributeError):
            # A value of the wrong type, already reported, stopped the value checks.
            if typed:
                raise
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems[:MAX_SHOWN])
        more = f"\n  - ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        raise NotebookError(
            f"{where}: the campaign notebook has {len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}:\n{lines}{more}\n"
            f"Fix them in the file, then run `cockpit check {Path(where).parent}`."
        )
    assert nb is not None
    return nb


MAX_SHOWN = 50


def _syntax_message(where: Path | str, text: str, exc: Exception) -> str:
    import re

    lineno = getattr(exc, "lineno", None)
    msg = str(getattr(exc, "msg", exc))
    if lineno is None:  # before Python 3.14 the position is only in the text
        m = re.search(r"line (\d+)", msg)
        lineno = int(m.group(1)) if m else None
    msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg).rstrip(".")
    shown = ""
    if lineno:
        lines = text.splitlines()
        if 0 < lineno <= len(lines):
            shown = f" The line reads: {lines[lineno - 1].strip()!r}."
    at = f" at line {lineno}" if lineno else ""
    if not lineno and "end of document" in str(getattr(exc, "msg", exc)):
        at = " at the end of the file"
    folder = Path(where).parent
    return (
        f"{where}: this is not valid TOML{at}: {msg}.{shown} "
        f"Fix the syntax there (strings need quotes, tables [name], arrays of tables [[name]]), "
        f"then run `cockpit check {folder}`."
    )


def _build_notebook(data: Mapping[str, object], problems: list[str]) -> Notebook | None:
    for key in data:
        if key not in SECTIONS:
            problems.append(f"unknown section [{key}]: the sections are {', '.join(SECTIONS)}" + suggest(key, SECTIONS))
    campaign = data.get("campaign")
    probe = isinstance(campaign, dict) and campaign.get("kind") == "probe"
    if isinstance(campaign, dict) and campaign.get("kind", "task") not in CAMPAIGN_KINDS:
        problems.append(
            f"campaign.kind: is {campaign.get('kind')!r}; use task (the default) or probe "
            "(made by `cockpit probe -- COMMAND`)"
        )
    for key in REQUIRED_SECTIONS:
        if key not in data and not (probe and key in PROBE_OPTIONAL):
            problems.append(f"missing section [{key}]")
    built: dict[str, Any] = {}  # the sections converted to their dataclasses, for Notebook(**built)
    for key, typ in SECTIONS.items():
        if key not in data:
            continue
        built[key] = _convert(data[key], typ, key, problems)
    if probe:
        for key, section in probe_campaign_sections().items():
            if key in data:
                problems.append(
                    f'[{key}] in a probe campaign ([campaign] kind = "probe"): a probe measures the script\'s own '
                    f'settings from its command line; remove [{key}], or remove kind = "probe" to make this a '
                    "task campaign (then [task], [batch], [training] and [variants] are all needed)"
                )
            built[key] = section
    if any(k not in built or built[k] is None for k in REQUIRED_SECTIONS):
        return None
    try:
        return Notebook(**built)
    except TypeError as exc:  # pragma: no cover - _convert reports before this
        problems.append(str(exc))
        return None


_KINDS: dict[Any, tuple[str, Any]] = {}


def _kind_of(typ: Any) -> tuple[str, Any]:
    """What a type hint is ("optional", "dataclass", "list", "dict" or "plain") and its argument; computed once."""
    kind = _KINDS.get(typ)
    if kind is None:
        origin = typing.get_origin(typ)
        args = typing.get_args(typ)
        if origin in (typing.Union, types.UnionType):
            kind = ("optional", next(a for a in args if a is not type(None)))
        elif dataclasses.is_dataclass(typ):
            kind = ("dataclass", None)
        elif origin is list:
            kind = ("list", args[0])
        elif origin is dict or typ is dict:
            kind = ("dict", None)
        else:
            kind = ("plain", typ)
        _KINDS[typ] = kind
    return kind


def _convert(value: Any, typ: Any, path: str, problems: list[str]) -> Any:
    kind, arg = _kind_of(typ)
    if kind == "optional":
        return _convert(value, arg, path, problems)
    if kind == "dataclass":
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a table, got {_tname(value)}")
            return None
        hints, fields, plain, required = _shape(typ)
        kwargs: dict[str, Any] = {}
        for k, v in value.items():
            simple = plain.get(k)
            if simple is not None:  # the common case, without typing introspection: a value of the right type
                t = type(v)
                if t is simple:
                    kwargs[k] = v
                    continue
                if simple is float and t is int:
                    kwargs[k] = float(v)
                    continue
                if simple is list and t is list and not v:
                    kwargs[k] = []
                    continue
            elif k not in fields:
                problems.append(
                    f"{path}.{k}: unknown key; the keys of [{path.split('[')[0]}] are "
                    f"{', '.join(fields)}" + suggest(k, fields)
                )
                continue
            kwargs[k] = _convert(v, hints[k], f"{path}.{k}", problems)
        missing = [n for n in required if n not in value]
        for n in missing:
            problems.append(f"{path}.{n}: required key is missing")
        if missing:
            return None
        return typ(**kwargs)
    if kind == "list":
        if not isinstance(value, list):
            problems.append(f"{path}: expected an array, got {_tname(value)}")
            return []
        if arg in (str, int, bool) and all(type(v) is arg for v in value):
            return list(value)  # the common case: nothing to convert
        return [_convert(v, arg, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if kind == "dict":
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a table, got {_tname(value)}")
            return {}
        return dict(value)
    if typ is bool:
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, got {_tname(value)} {value!r}")
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected a whole number, got {_tname(value)} {value!r}")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{path}: expected a number, got {_tname(value)} {value!r}")
            return value
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {_tname(value)} {value!r}")
        return value
    return value  # pragma: no cover


_SHAPES: dict[Any, Any] = {}


def _shape(typ: Any) -> tuple[dict[str, object], dict[str, dataclasses.Field[Any]], dict[str, type], list[str]]:
    """A section's type hints, fields, the plain type of each scalar field (str, int, float, bool; optional
    or not) and its required fields, computed once: get_type_hints is slow, and a notebook with 200,000
    decisions converts 200,000 tables."""
    shape = _SHAPES.get(typ)
    if shape is None:
        hints = typing.get_type_hints(typ)
        fields = {f.name: f for f in dataclasses.fields(typ) if f.init and f.name not in ("path", "digest")}
        plain: dict[str, type] = {}
        for name in fields:
            hint = hints[name]
            if typing.get_origin(hint) in (typing.Union, types.UnionType):
                inner = [a for a in typing.get_args(hint) if a is not type(None)]
                hint = inner[0] if len(inner) == 1 else None
            if hint in (str, int, float, bool):
                plain[name] = hint
            elif typing.get_origin(hint) is list:
                plain[name] = list  # only an empty list takes the fast path
        required = [
            n
            for n, f in fields.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        shape = _SHAPES[typ] = (hints, fields, plain, required)
    return shape


def _tname(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "a whole number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)
