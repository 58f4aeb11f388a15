"""The weights build_model loads are still there when it returns: an initialisation run after the load over the
whole model (``model.apply(init_weights)`` meant for a new head) is named at the load's line; a re-initialised
last layer, a cast to bf16 and a replaced head are not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from cockpit.pilot import loads
from tests.gates.test_phases import check, classifier, through

LOADED = loads.NAME


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(6, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 3))


def _pretrained(tmp_path: Path) -> Path:
    path = tmp_path / "pretrained.pt"
    torch.manual_seed(1)
    torch.save(_net().state_dict(), path)
    return path


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def test_an_init_applied_over_the_whole_model_after_the_load_fails_at_the_loads_line(tmp_path: Path) -> None:
    path = _pretrained(tmp_path)

    def build(params: dict[str, Any]) -> nn.Module:
        model = _net()
        model.load_state_dict(torch.load(path, weights_only=True))
        model.apply(_init_weights)  # meant for the head; the body's loaded weights go with it
        return model

    c = check(through(classifier(build_model=build), "forward")["forward"], LOADED)
    assert not c["ok"] and not c.get("warn"), c
    assert "4 of the 4 weights load_state_dict placed in Sequential" in c["detail"], c["detail"]
    assert "test_loaded_weights_kept.py:" in c["detail"] and "model.apply(init_weights)" in c["detail"], c["detail"]
    assert "in _init_weights wrote over them after the load" in c["detail"], c["detail"]


def test_a_reinitialised_last_layer_a_replaced_head_and_a_bf16_cast_pass(tmp_path: Path) -> None:
    path = _pretrained(tmp_path)

    def last_layer(params: dict[str, Any]) -> nn.Module:
        model = _net()
        model.load_state_dict(torch.load(path, weights_only=True))
        model[3].reset_parameters()  # the top layer re-initialised for the new task, as some fine-tunes do
        return model

    c = check(through(classifier(build_model=last_layer), "forward")["forward"], LOADED)
    assert c["ok"] and "re-initialised after the load" in c["detail"] and "3.weight" in c["detail"], c

    def new_head(params: dict[str, Any]) -> nn.Module:
        model = _net()
        model.load_state_dict(torch.load(path, weights_only=True))
        model[3] = nn.Linear(32, 3)  # a new head: new tensors, not the loaded ones
        return model

    c = check(through(classifier(build_model=new_head), "forward")["forward"], LOADED)
    assert c["ok"] and "re-initialised" not in c["detail"], c

    with loads.recorded() as got:
        model = _net()
        model.load_state_dict(torch.load(path, weights_only=True))
        model.to(torch.bfloat16)
        model[0].bias.data = torch.ones(0)  # emptied (a sharding wrapper): no longer compared
    assert got[0].compared == 3 and got[0].overwritten == (), got
    assert got[0].site.startswith("tests/gates/test_loaded_weights_kept.py:"), got[0].site


def test_constant_tensors_are_not_compared(tmp_path: Path) -> None:
    """LayerNorm's ones and zeros come back the same from a re-initialisation: they prove nothing either way."""
    path = _pretrained(tmp_path)
    with loads.recorded() as got:
        model = _net()
        model.load_state_dict(torch.load(path, weights_only=True))
        model.apply(_init_weights)
    assert got[0].compared == 4 and set(got[0].overwritten) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    assert loads.judge(got)[0] == "fail"
