"""Blind families: model families NOT on the shelf, written from the docs as a new user would, each a campaign
made like the shelf's (``tests.shelf.campaigns``), with two broken twins. ``python -m tests.blind.run`` pilots them."""

from __future__ import annotations

from pathlib import Path

import tomli_w

from tests.shelf.campaigns import BASE_BATCH, BASE_PILOT, Case

BLIND = Path(__file__).resolve().parent

CASES: dict[str, Case] = {
    "bart": Case("hf_bart_task.py:task", training={"lr": 1e-3}),
    "llama": Case("hf_llama_task.py:task", training={"lr": 1e-3}),
    "vae": Case("vae_task.py:task", training={"lr": 1e-3}),
    "vae_sampled": Case("vae_task.py:task", {"sample_always": True}, training={"lr": 1e-3}),
    "ner": Case("hf_ner_task.py:task", training={"lr": 1e-3}),
    # SegFormer's decode head has a BatchNorm: like the shelf's ResNet, the healthy case updates on one microbatch
    # (with accumulation the gate warns, by design, naming BatchNorm; see "segformer_accumulated")
    "segformer": Case("hf_segformer_task.py:task", batch={"microbatch": 8, "accumulation": 1}, training={"lr": 1e-3}),
    "gru_seq2seq": Case("gru_seq2seq_task.py:task", training={"lr": 3e-3}),
    "audio_cls": Case("hf_audio_cls_task.py:task", training={"lr": 1e-3}),
    "neox": Case("hf_neox_task.py:task", training={"lr": 1e-3}),
    "bert_multilabel": Case("hf_bert_multilabel_task.py:task", training={"lr": 1e-3}),
    "mamba": Case("hf_mamba_task.py:task", training={"lr": 1e-3}),
    "seqcls_multilabel": Case("hf_seqcls_multilabel_task.py:task", training={"lr": 1e-3}),
    "convnext": Case("hf_convnext_task.py:task", training={"lr": 1e-3}),
    "multilabel": Case("multilabel_task.py:task", training={"lr": 1e-3}),
    "segformer_accumulated": Case(
        "hf_segformer_task.py:task",
        training={"lr": 1e-3},
        family="segformer",
        expect="passed",
        gate="accumulation",
        check="accumulated == single batch",
        verdict="warn",
        words=("BatchNorm",),
    ),
    "multilabel_double_sigmoid": Case(
        "multilabel_double_sigmoid.py:task",
        training={"lr": 1e-3},
        family="multilabel",
        expect="failed",
        gate="forward",
        check="initial loss as the objective implies",
        words=("a double sigmoid", "Remove the model's last sigmoid", "multilabel_task.py:"),
    ),
    "vae_kl_flipped": Case(
        "vae_kl_flipped.py:task",
        training={"lr": 1e-3},
        family="vae",
        expect="failed",
        gate="overfit",
        check="loss bounded below",  # the fit passes; run on past it, the loss falls faster and faster
        words=("unbounded below", "wrong sign"),
    ),
    "gru_decoder_sees_labels": Case(
        "gru_decoder_sees_labels.py:task",
        training={"lr": 3e-3},
        family="gru_seq2seq",
        expect="failed",
        gate="data",
        check="targets aligned as declared",
        words=("copy",),
    ),
    "ner_pad_zero": Case(
        "hf_ner_pad_zero.py:task",
        training={"lr": 1e-3},
        family="ner",
        expect="failed",
        gate="data",
        check="padding not in the loss",
        words=("attention_mask == 0", "-100"),
    ),
}


def write(folder: Path, name: str) -> Path:
    """campaigns/<name>/campaign.toml in ``folder`` for the blind case; returns the campaign folder."""
    case = CASES[name]
    camp = folder / "campaigns" / name
    camp.mkdir(parents=True, exist_ok=True)
    file, attr = case.entry.split(":")
    doc = {
        "campaign": {"name": name, "question": f"does {name} train as written?", "held_constant": "updates"},
        "task": {"entry": f"{BLIND / file}:{attr}", "params": case.params},
        "batch": {**BASE_BATCH, **case.batch},
        "training": {"lr": 1e-3, "device": "cpu", **case.training},
        "variants": [{"id": "ref", "reference": True}],
        "pilot": {**BASE_PILOT, **case.pilot},
    }
    (camp / "campaign.toml").write_text(tomli_w.dumps(doc), "utf-8")
    return camp
