"""The float inputs' ranges judged (data gate): the statistics :mod:`cockpit.pilot.inputrange` gathers while the data
gate scans every example, against what the model and the task declare (an image size, a normaliser's mean and
std). An unusual range is not proof: every finding warns, with its figures and the likely cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..gate import Gate
from ..inputrange import FieldStats, InputStats

NAME = "float inputs in range"


@dataclass
class Declared:
    """What the task or the model says about its inputs (hints, checked against the measurement)."""

    mean: list[float] | None = None
    std: list[float] | None = None
    image_size: int | None = None
    channels: int | None = None
    where: str = ""


def declared(task: Any, model: Any) -> Declared:
    d = Declared()
    extras = getattr(task, "extras", {}) or {}
    mean, std = extras.get("image_mean"), extras.get("image_std")
    if isinstance(mean, Sequence) and isinstance(std, Sequence) and len(mean) == len(std) and all(std):
        d.mean, d.std = [float(m) for m in mean], [float(s) for s in std]
    config = getattr(model, "config", None)
    for cfg in (config, getattr(config, "vision_config", None)):
        size = getattr(cfg, "image_size", None)
        if isinstance(size, (list, tuple)) and size:
            size = size[0]
        if isinstance(size, int) and size > 0 and d.image_size is None and _chosen(cfg, "image_size"):
            d.image_size, d.where = size, f"{type(cfg).__name__}.image_size"
        ch = getattr(cfg, "num_channels", None)
        if isinstance(ch, int) and ch > 0 and d.channels is None:
            d.channels = ch
    return d


def _chosen(cfg: Any, key: str) -> bool:
    """A config value someone chose (a checkpoint's, or set by the code), not the config class's default: a
    ConvNeXt config says image_size = 224 whatever images its size-agnostic model is built for."""
    if getattr(cfg, "_name_or_path", ""):
        return True
    try:
        return bool(getattr(type(cfg)(), key, None) != getattr(cfg, key, None))
    except Exception:  # a config that cannot be built bare: take its value as chosen
        return True


def _image_causes(name: str, s: FieldStats, d: Declared) -> list[str]:
    out = []
    if s.low >= 0 and 20 <= s.high <= 255.5:
        out.append(
            f"{name} spans {s.low:.3g}..{s.high:.3g} ({s.figures()}): raw 8-bit pixel values, never normalised; "
            "a model built for normalised inputs sees values ~100x too large. Divide by 255 and normalise with the "
            "model's mean and std (its image processor does both)"
        )
        return out
    means = [s.channel(c) for c in range(len(s.channels))]
    if d.mean and d.std and len(d.mean) == len(means):
        twice = [(-m / sd, 1 / sd) for m, sd in zip(d.mean, d.std, strict=True)]
        # once, a channel's std is about 1; again, about 1 / std (4.4 for ImageNet's): the std is the signature,
        # the mean only its sign (it moves by -mean / std)
        if s.low < 0 and all(
            max(0.5 * ts, 2.5) < sc < 2 * ts and mc < 0.5 for (mc, sc), (_, ts) in zip(means, twice, strict=True)
        ):
            shown = ", ".join(f"{mc:.2f}/{sc:.2f}" for mc, sc in means)
            out.append(
                f"{name}'s per-channel mean/std are {shown}: what images already normalised with the declared mean "
                f"{d.mean} and std {d.std} give when normalised again (about "
                f"{', '.join(f'{tm:.2f}/{ts:.2f}' for tm, ts in twice)}). Normalise once (the image processor, or "
                "your transform, not both)"
            )
            return out
        if s.low >= 0 and s.high <= 1.0 and any(abs(m) > 0.1 for m in d.mean):
            out.append(
                f"{name} lies in [0, 1] ({s.figures()}) while the task declares a normaliser (mean {d.mean}, std "
                f"{d.std}): the images were scaled but never normalised. Apply (x - mean) / std"
            )
            return out
    if means and s.low < 0 and (max(abs(s.low), abs(s.high)) > 30 or s.std > 10):
        out.append(
            f"{name} spans {s.low:.3g}..{s.high:.3g} ({s.figures()}): far beyond the ~0/~1 of normalised images, as "
            "raw sensor or scan values (Hounsfield units, 16-bit intensities) are. Normalise them (subtract a mean, "
            "divide by a std measured on the training set)"
        )
        return out
    if not d.mean and means and s.low < 0 and all(sc > 2.5 for _, sc in means):
        shown = ", ".join(f"{mc:.2f}/{sc:.2f}" for mc, sc in means)
        out.append(
            f"{name}'s per-channel mean/std are {shown}: a std far above the ~1 of normalised images, as images "
            "normalised twice give (ImageNet's mean and std applied again multiply the std by about 4.4), or divided "
            "by a std far too small. Normalise once"
        )
    return out


def size_causes(name: str, s: FieldStats, d: Declared) -> list[str]:
    out = []
    if d.image_size:
        far = sorted({hw for hw in s.sizes if max(hw) > 2 * d.image_size or max(hw) < d.image_size / 2})
        if far:
            out.append(
                f"{name} is {'x'.join(map(str, far[0]))} while the model was built for {d.image_size} ({d.where}): "
                "resized far from its size, its patches or receptive fields no longer cover the image as at "
                "pretraining. Resize to the model's size (its image processor does)"
            )
    if d.channels and s.channels and len(s.channels) != d.channels:
        out.append(f"{name} has {len(s.channels)} channels while the model declares num_channels = {d.channels}")
    return out


def _splits_differ(name: str, train: FieldStats, other: FieldStats, split: str) -> str:
    if not train.n or not other.n or train.std == 0:
        return ""
    shift = abs(other.mean - train.mean) / train.std
    ratio = other.std / train.std if train.std else 1.0
    if shift > 3 or ratio > 4 or ratio < 0.25:
        return (
            f"{name} in {split} ({other.figures()}) is on another scale than in train ({train.figures()}): "
            "the splits are normalised differently (a transform applied to one only). Give every split the same "
            "preprocessing"
        )
    return ""


def judge(g: Gate, stats: Mapping[str, InputStats], d: Declared) -> None:
    """The check over the statistics of every split (``g`` is the data gate's)."""
    train = stats.get("train")
    if train is None or not any(s.n for s in train.fields.values()):
        g.not_applicable(NAME, "the batch has no float input (images, audio, features): token ids are checked by range")
        return
    g.extra["float_inputs"] = {
        split: {
            k: {"mean": s.mean, "std": s.std, "min": s.low, "max": s.high, "rows": s.rows}
            for k, s in st.fields.items()
            if s.n
        }
        for split, st in stats.items()
    }
    causes: list[str] = []
    for name, s in train.fields.items():
        if not s.n:
            continue
        if s.image:
            causes += _image_causes(name, s, d)
            causes += size_causes(name, s, d)
        elif s.wave and s.std > 50:
            causes.append(
                f"{name} is a waveform with {s.figures()}: the scale of 16-bit samples (-32768..32767), never "
                "scaled to [-1, 1]. Divide by 32768, or let the feature extractor normalise it"
            )
        for split, st in stats.items():
            if split != "train" and name in st.fields:
                words = _splits_differ(name, s, st.fields[name], split)
                if words:
                    causes.append(words)
    shown = "; ".join(f"{k}: {s.figures()}" for k, s in train.fields.items() if s.n)
    if causes:
        g.check(
            NAME,
            False,
            "; ".join(causes) + f" (an unusual range is not proof: a model may normalise inside; train split: {shown})",
            warn=True,
        )
    else:
        hint = f"; declared {d.where} {d.image_size}" if d.image_size else ""
        g.check(NAME, True, f"train split: {shown}{hint}")
