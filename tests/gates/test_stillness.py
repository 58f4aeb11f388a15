"""A trainable tensor a step left unchanged: why, measured from its gradient (cockpit.pilot.stillness).

A bias right before a BatchNorm gets a gradient at rounding level (the norm's mean subtraction cancels it), so
plain SGD cannot move it: the classic CIFAR ResNet with bias=True convolutions. The probe warned on it, and the
pilot's update_first failed it, on a healthy model; both now say it is harmless. A tensor with a real gradient
that did not move, or with none, is still a finding."""

from __future__ import annotations

import torch
from torch import nn

from cockpit.pilot.stillness import classify
from tests.gates.test_probe import probe  # noqa: F401 - the fixture


def conv_bn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 3),
    )


def test_a_bias_before_a_batchnorm_is_cancelled_and_a_real_gradient_is_not() -> None:
    for seed in range(3):
        model = conv_bn(seed)
        nn.functional.cross_entropy(model(torch.randn(16, 1, 8, 8)), torch.randint(0, 3, (16,))).backward()
        assert model[0].bias.grad is not None and bool(model[0].bias.grad.any())  # not exactly zero
        s = classify(model.named_parameters(), ["0.bias", "5.bias"])
        assert s.cancelled == ["0.bias"] and s.unexplained == ["5.bias"], s
        assert s.ratios["0.bias"] < 1e-4
        assert "a bias right before a normalisation layer" in s.cancelled_words()
    model[5].weight.grad = None
    model[5].bias.grad = torch.zeros_like(model[5].bias)
    s = classify(model.named_parameters(), ["5.weight", "5.bias"])
    assert s.no_gradient == ["5.weight", "5.bias"] and not s.cancelled


def test_the_probe_passes_sgd_on_a_convolution_with_a_bias_before_its_batchnorm(probe) -> None:  # noqa: F811
    _, sink = probe(steps=3)
    model = conv_bn()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    for _ in range(5):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(16, 1, 8, 8)), torch.randint(0, 3, (16,))).backward()
        opt.step()
    g = sink.gates["update_first"]
    check = next(c for c in g["checks"] if c["name"] == "targeted parameters changed")
    assert check["ok"] is True and g["verdict"] == "pass", g
    assert "0.bias" in check["detail"] and "harmless" in check["detail"], check


def test_the_pilot_passes_sgd_on_a_convolution_with_a_bias_before_its_batchnorm() -> None:
    from cockpit.pilot.task import load_task
    from tests.gates.test_verdicts import TASKS, check, phases

    task = load_task(f"{TASKS / 'bias_before_norm.py'}:task", TASKS)
    gates = phases(task, "update_first", {"optimizer": "sgd", "momentum": 0.9})
    g = gates["update_first"]
    c = check(g, "targeted parameters changed")
    assert g.verdict.value == "pass", g.checks
    assert "0.bias" in c["detail"] and "harmless" in c["detail"], c
