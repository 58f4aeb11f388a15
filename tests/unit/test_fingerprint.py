"""The parameter checks the pilot and the probe share (cockpit/pilot/tensorscan.py): read in chunks, so a check
adds a bounded amount to a phase's measured peak, and the same answer whatever the chunk."""

from __future__ import annotations

import math

import torch

from cockpit.pilot.phases.steps import param_fingerprint
from cockpit.pilot.tensorscan import all_finite, fingerprint


def test_the_fingerprint_does_not_depend_on_the_chunk() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(37, 29), torch.nn.Linear(29, 1))
    whole = fingerprint(model.named_parameters(), chunk=1 << 22)
    for chunk in (1, 7, 64):
        got = fingerprint(model.named_parameters(), chunk=chunk)
        for name in whole:
            assert all(
                math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) for a, b in zip(got[name], whole[name], strict=True)
            )
    assert param_fingerprint(model, chunk=7).keys() == whole.keys()


def test_a_plus_minus_lr_step_across_chunk_boundaries_is_seen() -> None:
    model = torch.nn.Linear(8, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(0.1, 0.8, 8).reshape(1, 8))
    before = param_fingerprint(model, chunk=3)["weight"]
    with torch.no_grad():
        model.weight += torch.tensor([[1e-3, -1e-3] * 4])  # Adam's first step: the plain and absolute sums stay put
    after = param_fingerprint(model, chunk=3)["weight"]
    assert math.isclose(after[0], before[0], abs_tol=1e-9) and math.isclose(after[1], before[1], abs_tol=1e-9)
    assert abs(after[2] - before[2]) > 1e-5


def test_a_single_element_and_an_empty_parameter() -> None:
    model = torch.nn.Module()
    model.one = torch.nn.Parameter(torch.tensor([2.5]))
    model.none = torch.nn.Parameter(torch.empty(0))
    got = param_fingerprint(model)
    assert got["one"][:2] == (2.5, 2.5) and got["none"] == (0.0, 0.0, 0.0)


def test_all_finite_finds_one_bad_element_in_any_chunk() -> None:
    t = torch.zeros(10)
    assert all_finite(t, chunk=3) and all_finite(torch.empty(0))
    for i in (0, 5, 9):
        for bad in (float("nan"), float("inf"), float("-inf")):
            u = t.clone()
            u[i] = bad
            assert not all_finite(u, chunk=3), (i, bad)
