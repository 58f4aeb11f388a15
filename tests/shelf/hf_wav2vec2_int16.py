"""Broken twin of the CTC speech task: the waveforms are read as 16-bit integers (``soundfile.read(...,
dtype="int16")``, or ``scipy.io.wavfile.read``) and handed to the model as floats without scaling them to [-1, 1]
(the feature extractor that would normalise them is skipped). The data gate must warn, naming the 16-bit scale."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.shelf import hf_wav2vec2_ctc_task as base


def datasets(params: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out = base.datasets(params)
    for split in out.values():
        for e in split:  # the samples as the file stores them
            e["audio"] = [float(round(max(min(v / 1.5, 1.0), -1.0) * 32767)) for v in e["audio"]]
    return out


task = dataclasses.replace(base.task, datasets=datasets)
