"""The batch dimension the probe records is read from the call, not assumed to be dim 0 (issue 26: a time-major
RNN's input [bptt=20, batch=4] was recorded as microbatch 20)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cockpit.probe.observer import ProbeStop
from tests.gates.test_probe import probe  # noqa: F401 - the fixture


class TimeMajor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.rnn, self.out = nn.Embedding(30, 8), nn.LSTM(8, 16, 2), nn.Linear(16, 30)

    def forward(self, x: torch.Tensor, hidden: tuple[torch.Tensor, torch.Tensor]):
        out, hidden = self.rnn(self.emb(x), hidden)
        return self.out(out), hidden


def train(model: nn.Module, batches: list[tuple[torch.Tensor, ...]], hidden: bool) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for x, y in batches:
            if hidden:
                h = (torch.zeros(2, x.shape[1], 16), torch.zeros(2, x.shape[1], 16))
                out, _ = model(x, h)
            else:
                out = model(x)
            nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
            with torch.no_grad():
                model.eval()
                model(x, h) if hidden else model(x)
                model.train()
    except ProbeStop:
        pass


def test_the_batch_dim_flag_is_recorded_for_the_script(campaign, monkeypatch):
    import sys

    from cockpit import cli
    from cockpit import notebook as nbm
    from cockpit.commands import probe as cmd

    def fake_new_run(path, variant, seed, **kw):
        raise SystemExit(0)  # stop before any process starts

    monkeypatch.setattr(cmd.launch, "new_run", fake_new_run)
    with pytest.raises(SystemExit):
        cli.main(["probe", str(campaign), "--batch-dim", "1", "--", sys.executable, "t.py"])
    spec = nbm.load(campaign).probe
    assert spec is not None and spec.env == {"COCKPIT_PROBE_BATCH_DIM": "1"}
    assert cli.main(["probe", str(campaign), "--batch-dim", "12", "--", sys.executable, "t.py"]) == 2


def test_a_batch_first_model_keeps_dim_0(probe):  # noqa: F811
    _, sink = probe(steps=2, to_end=True)
    model = nn.Sequential(nn.Embedding(30, 8), nn.Linear(8, 30))
    train(model, [(torch.randint(0, 30, (4, 20)), torch.randint(0, 30, (4, 20))) for _ in range(3)], hidden=False)
    assert sink.gates["forward"]["inputs"]["microbatch"] == 4 and "batch_dim" not in sink.gates["forward"]["inputs"]


@pytest.mark.parametrize("env", ["", "1"])
def test_the_data_loader_or_the_environment_names_the_batch_dim(probe, monkeypatch, env):  # noqa: F811
    """A collate that yields [time, batch]: the loader's batch_size says which dim is the batch."""
    if env:
        monkeypatch.setenv("COCKPIT_PROBE_BATCH_DIM", env)
    _, sink = probe(steps=2, to_end=True)
    rows = torch.randint(0, 30, (24, 12))
    loader = torch.utils.data.DataLoader(
        rows, batch_size=3 if not env else 6, collate_fn=lambda b: torch.stack(b).t().contiguous()
    )
    model = nn.Sequential(nn.Embedding(30, 8), nn.Linear(8, 30))
    train(model, [(x, x) for x in loader], hidden=False)
    inputs = sink.gates["forward"]["inputs"]
    assert inputs["batch_dim"] == 1 and inputs["microbatch"] == (3 if not env else 6)
    assert inputs["batch_dim_from"] == ("the data loader's batch_size (3)" if not env else "COCKPIT_PROBE_BATCH_DIM")
