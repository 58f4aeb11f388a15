"""The parameter fingerprint the update gates compare: read in chunks, so Cockpit's own check adds a bounded
amount to a phase's measured peak, and still sees a step that moves every element by +-lr."""

from __future__ import annotations

import torch

from cockpit.pilot.phases.steps import param_fingerprint


def _whole(p: torch.Tensor) -> tuple[float, float, float]:
    """The fingerprint as it was computed before chunking: one float64 copy and ramp of the whole tensor."""
    d = p.detach().double().flatten()
    ramp = torch.linspace(1.0, 2.0, d.numel(), dtype=torch.float64)
    return float(d.sum()), float(d.abs().sum()), float((d * ramp).sum())


def test_chunks_give_the_whole_tensor_fingerprint() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(37, 29), torch.nn.Linear(29, 1))
    for chunk in (1, 7, 64, 1 << 22):
        got = param_fingerprint(model, chunk=chunk)
        for name, p in model.named_parameters():
            want = _whole(p)
            assert all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(got[name], want, strict=True)), (
                chunk,
                name,
            )


def test_a_plus_minus_lr_step_across_chunk_boundaries_is_seen() -> None:
    model = torch.nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(0.1, 0.8, 8).reshape(1, 8))
    before = param_fingerprint(model, chunk=3)
    with torch.no_grad():
        model.weight += torch.tensor([[1e-3, -1e-3] * 4])  # Adam's first step: sum and |sum| stay the same
    after = param_fingerprint(model, chunk=3)["weight"]
    assert abs(after[2] - before["weight"][2]) > 1e-4


def test_a_single_element_and_an_empty_parameter() -> None:
    model = torch.nn.Module()
    model.one = torch.nn.Parameter(torch.tensor([2.5]))
    model.none = torch.nn.Parameter(torch.empty(0))
    got = param_fingerprint(model)
    assert got["one"] == (2.5, 2.5, 2.5)
    assert got["none"] == (0.0, 0.0, 0.0)
