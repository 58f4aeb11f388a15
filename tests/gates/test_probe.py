"""`cockpit probe` without processes: the instrumentation in this interpreter, the judge, the resume check,
the [probe] notebook table, and the readers (sheet, plan, compare, runs) on a probed run.

The instrumentation is installed here on a small loop and removed after each test; what it would send
to its run process is collected as messages. Real probes (processes, the two test scripts, failures,
the TUI) are in tests/integration/test_probe_runs.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from cockpit import cli, runs
from cockpit import events as ev
from cockpit import notebook as nbm
from cockpit.probe import judge, resume
from cockpit.probe.instrument import Instrument
from cockpit.probe.observer import Config, Observer, ProbeStop
from tests.fake_runs import cpu_stack, gate, gpu_stack, make_campaign, mem, write_run

# --------------------------------------------------------------------------- the instrumentation, in process


class Sink:
    def __init__(self) -> None:
        self.msgs: list[dict[str, Any]] = []

    def __call__(self, msg: str, **payload: Any) -> None:
        self.msgs.append(json.loads(json.dumps({"msg": msg, **payload}, default=str)))  # as it crosses the pipe

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m["event"] for m in self.msgs if m["msg"] == "event" and m["event"]["kind"] == kind]

    @property
    def gates(self) -> dict[str, dict[str, Any]]:
        return {g["phase"]: g for g in self.events(ev.GATE)}

    def check(self, phase: str, name: str) -> dict[str, Any]:
        return next(c for c in self.gates[phase]["checks"] if c["name"] == name)


@pytest.fixture
def probe():
    made: list[Instrument] = []

    def make(**cfg: Any) -> tuple[Instrument, Sink]:
        sink = Sink()
        obs = Observer(Config(**cfg), sink)
        inst = Instrument(obs, sink)
        inst.install()
        made.append(inst)
        return inst, sink

    yield make
    for inst in made:
        inst.uninstall()


def model_and_opt(
    lr: Any = 1e-2, frozen_in_opt: bool = False, dropout: bool = False
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small classifier; ``dropout``: one that behaves differently in training mode, so the mode checks apply."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3), *([nn.Dropout(0.1)] if dropout else []))
    model[0].bias.requires_grad_(False)
    params = list(model.parameters()) if frozen_in_opt else [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=lr)


def loop(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int = 12,
    eval_after: int = 3,
    save_after: int = 4,
    path: Path | None = None,
    eval_mode: bool = True,
    no_grad: bool = True,
    sched: Any = None,
    between: Any = None,
    nan: bool = False,
) -> str:
    """A plain loop (two microbatches per step); returns why the probe stopped it, or "" when it ran out."""
    crit = nn.CrossEntropyLoss()
    try:
        for step in range(1, steps + 1):
            for _ in range(2):
                x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
                loss = crit(model(x), y) / 2
                if nan:
                    loss = loss * float("nan")
                loss.backward()
            if between is not None:
                between()
            opt.step()
            if sched is not None:
                sched.step()
            opt.zero_grad()
            if step == eval_after:
                if eval_mode:
                    model.eval()
                with torch.no_grad() if no_grad else torch.enable_grad():
                    for _ in range(2):
                        crit(model(torch.randn(5, 8)), torch.randint(0, 3, (5,)))
                model.train()
            if step == save_after and path is not None:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, path)
    except ProbeStop as stop:
        return stop.reason
    return ""


def test_a_plain_loop_phase_by_phase(probe, tmp_path):
    _, sink = probe(steps=3)
    model, opt = model_and_opt()
    why = loop(model, opt, path=tmp_path / "ck.pt")
    assert why == "stopped by the probe after 4 steps and one save (at step 4)"
    gates = sink.gates
    assert list(gates) == ["stack", "forward", "backward", "update_first", "update_second", "validation", "save"]
    assert all(g["verdict"] == "pass" for g in gates.values()), {p: g["checks"] for p, g in gates.items()}
    # the model is on the CPU; the build is torch's own (a CUDA build on a GPU box, or on a CPU box with PyPI's torch)
    build = "cuda" if torch.version.cuda else ("rocm" if getattr(torch.version, "hip", None) else "cpu")
    assert gates["stack"]["inputs"]["device"] == "cpu" and gates["stack"]["stack"]["build"] == build
    assert (
        gates["forward"]["inputs"]["microbatch"] == 4 and gates["forward"]["inputs"]["trainable"] == 8 * 16 + 16 * 3 + 3
    )
    assert sink.check("forward", "finite loss")["ok"] and gates["forward"]["loss"] > 0
    assert sink.check("backward", "frozen parameters get no gradient")["detail"] == "1 frozen, none with a gradient"
    assert (
        gates["update_first"]["inputs"]["microbatches"] == 2 and gates["update_first"]["inputs"]["optimizer"] == "AdamW"
    )
    assert sink.check("update_first", "targeted parameters changed")["detail"].startswith("3/3")
    assert sink.check("update_first", "optimizer state allocated")["ok"]
    st = gates["update_second"]["step_time"]
    assert st["n"] == 2 and 0 < st["min"] <= st["median"] <= st["max"] < 5
    assert gates["validation"]["inputs"]["forwards"] == 2 and sink.check("validation", "eval mode")["ok"]
    assert gates["save"]["bytes"] == os.path.getsize(tmp_path / "ck.pt") > 0
    assert gates["save"]["inputs"]["files"] == ["ck.pt"] and gates["save"]["inputs"]["step"] == 4
    for g in gates.values():  # every phase measured within the same bounds: RSS always, torch counters absent
        assert g["mem"]["rss_peak"] > 50 * 2**20 and g["mem"]["torch"] is None and g["duration_s"] >= 0
    steps = sink.events(ev.STEP)
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert [s["phase"] for s in steps[:3]] == ["update_first", "update_second", "update_second"]
    assert all(s["opt_step"] == s["step"] and s["loss"] > 0 for s in steps[:3])  # the watched steps
    assert steps[3]["loss"] is None and steps[3]["opt_step"] is None  # later ones: no synchronize for them
    assert any(m["msg"] == "stopping" for m in sink.msgs)


def test_defects_judged_from_outside(probe, tmp_path):
    inst, sink = probe(steps=3, to_end=True)
    model, opt = model_and_opt(frozen_in_opt=True)
    model[2].bias.requires_grad_(False)  # frozen after the optimizer was built over every parameter

    def touch_frozen() -> None:
        with torch.no_grad():
            model[0].bias.add_(1.0)  # a frozen parameter changed by the script itself

    # evaluation in training mode and with grad: both defects
    loop(model, opt, steps=4, eval_mode=False, no_grad=False, between=touch_frozen)
    assert not sink.check("update_first", "frozen parameters unchanged")["ok"]
    assert "0.bias" in sink.check("update_first", "frozen parameters unchanged")["detail"]
    # 2.bias is held by the optimizer but frozen: no gradient, skipped by the step, as meant; not "unchanged"
    unchanged = sink.check("update_first", "targeted parameters changed")
    assert unchanged["ok"] and "it also holds 2 frozen" in unchanged["detail"], unchanged
    # no forward in eval mode and none without grad: nothing tells an evaluation from training, so none is measured
    inst.at_exit()
    assert (
        sink.gates["validation"]["verdict"] == "skipped" and "no evaluation seen" in sink.gates["validation"]["message"]
    )
    assert sink.gates["save"]["verdict"] == "skipped"


def test_a_parameter_change_is_seen_element_by_element(probe):
    """Two elements of a frozen bias swapped: their sum and their absolute sum stay the same (issue 26: a
    LayerNorm weight whose 64 elements all moved still summed to 64.0 and read as unchanged)."""
    _, sink = probe(steps=2, to_end=True)
    model, opt = model_and_opt()

    with torch.no_grad():
        model[0].bias.copy_(torch.arange(16.0))

    def swapped() -> None:
        with torch.no_grad():
            b = model[0].bias
            b[0], b[1] = b[1].clone(), b[0].clone()

    loop(model, opt, steps=2, eval_after=0, between=swapped)
    c = sink.check("update_first", "frozen parameters unchanged")
    assert not c["ok"] and "0.bias" in c["detail"]


def test_a_closure_step_owns_the_forward_and_backward_it_runs(probe):
    """optimizer.step(closure) (LBFGS; Lightning's automatic optimization): the closure's forward and backward
    are the update's; LBFGS's re-evaluations within one step are not more microbatches."""
    _, sink = probe(steps=3, to_end=True)
    model, _ = model_and_opt()
    opt = torch.optim.LBFGS([p for p in model.parameters() if p.requires_grad], lr=0.5, max_iter=4)
    crit = nn.CrossEntropyLoss()
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        return loss

    for _ in range(4):
        opt.step(closure)
    gates = sink.gates
    assert list(gates)[:5] == ["stack", "forward", "backward", "update_first", "update_second"], list(gates)
    assert all(gates[p]["verdict"] == "pass" for p in list(gates)[:5]), {p: g["checks"] for p, g in gates.items()}
    assert (
        gates["update_first"]["inputs"]["optimizer"] == "LBFGS" and gates["update_first"]["inputs"]["microbatches"] == 1
    )
    assert [s["step"] for s in sink.events(ev.STEP)] == [1, 2, 3, 4]


def test_a_hand_written_update_without_an_optimizer_is_an_update(probe, tmp_path):
    """p.data.add_(p.grad, alpha=-lr): no optimizer object, the version counter does not move; the probe sees
    the parameters changed where the script goes on (issue 26: it passed 'the script ended after 0 steps')."""
    _, sink = probe(steps=3)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    crit = nn.CrossEntropyLoss()
    try:
        for step in range(1, 20):
            model.zero_grad()
            crit(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
            if step == 2:
                model.eval()
                with torch.no_grad():
                    model(torch.randn(4, 8))
                model.train()
            if step == 4:
                torch.save(model, tmp_path / "model.pt")  # the whole model, as a word LM saves it
        why = ""
    except ProbeStop as stop:
        why = stop.reason
    assert why == "stopped by the probe after 4 steps and one save (at step 4)"
    gates = sink.gates
    assert list(gates) == ["stack", "forward", "backward", "update_first", "update_second", "validation", "save"]
    assert all(g["verdict"] == "pass" for g in gates.values()), {p: g["checks"] for p, g in gates.items()}
    assert "hand-written update" in sink.check("update_first", "update seen")["detail"]
    assert sink.check("update_first", "targeted parameters changed")["detail"].startswith("4/4")
    assert [s["step"] for s in sink.events(ev.STEP)] == [1, 2, 3, 4]
    assert sink.check("update_second", "gradients zeroed between updates")["ok"]
    from torch.nn.modules import module as mm

    assert not mm._global_forward_pre_hooks and "__call__" in nn.Sequential.__dict__  # off the submodules


def test_a_script_that_never_updates_never_passes(probe):
    inst, sink = probe(steps=3)
    model, _ = model_and_opt()
    crit = nn.CrossEntropyLoss()
    for _ in range(3):
        crit(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
    inst.at_exit()
    g = sink.gates["update_first"]
    assert g["verdict"] == "fail", g
    assert "3 backward() calls and no update" in g["message"] and "no parameter changed" in g["message"]
    w = watched(exit=sink.msgs[-1], returncode=0, gates=sink.gates)
    assert judge.judge_gates(w, "train.py").status == ev.Status.FAILED


def test_gradients_never_zeroed_between_updates_fail(probe):
    _, sink = probe(steps=3, to_end=True)
    model, opt = model_and_opt()
    crit = nn.CrossEntropyLoss()
    for _ in range(4):  # nanoGPT with its zero_grad removed
        for _ in range(2):
            (crit(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))) / 2).backward()
        opt.step()
    c = sink.check("update_second", "gradients zeroed between updates")
    assert not c["ok"] and "never zeroed between update 1 and update 2" in c["detail"]
    assert sink.gates["update_second"]["verdict"] == "fail"


def test_training_left_in_eval_mode_after_an_evaluation_that_a_save_ended(probe, tmp_path):
    """Evaluate, save, train on in eval mode: the evaluation's row says so although the save ended it."""
    _, sink = probe(steps=2)
    model, opt = model_and_opt(dropout=True)
    crit = nn.CrossEntropyLoss()
    try:
        for step in range(1, 10):
            crit(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
            opt.step()
            opt.zero_grad()
            if step == 3:
                model.eval()
                with torch.no_grad():
                    model(torch.randn(4, 8))
                torch.save(model.state_dict(), tmp_path / "ck.pt")  # model.train() forgotten
    except ProbeStop:
        pass
    c = sink.check("validation", "training mode restored")
    assert not c["ok"] and "ran in eval mode" in c["detail"] and sink.gates["validation"]["verdict"] == "fail"
    assert sink.gates["save"]["verdict"] == "pass"


def test_a_training_forward_in_eval_mode_right_after_an_evaluation_is_training_not_evaluation(probe):
    _, sink = probe(steps=2, to_end=True)
    model, opt = model_and_opt(dropout=True)
    crit = nn.CrossEntropyLoss()
    for step in range(1, 5):
        crit(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
        opt.step()
        opt.zero_grad()
        if step == 2:
            model.eval()
            with torch.no_grad():
                model(torch.randn(4, 8))
    assert not sink.check("validation", "training mode restored")["ok"]
    assert sink.check("validation", "no grad")["ok"] and sink.gates["validation"]["inputs"]["forwards"] == 1


def test_a_layer_left_out_of_every_optimizer_fails_but_a_gan_s_two_optimizers_pass(probe):
    _, sink = probe(steps=2, to_end=True)
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8)), nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gen[0].parameters(), lr=1e-3)  # gen[1] left out: it gets gradients, never moves
    bce = nn.BCEWithLogitsLoss()
    for _ in range(3):
        fake = gen(torch.randn(4, 4))
        opt_d.zero_grad()
        (bce(disc(torch.randn(4, 8)), torch.ones(4, 1)) + bce(disc(fake.detach()), torch.zeros(4, 1))).backward()
        opt_d.step()
        opt_g.zero_grad()
        bce(disc(fake), torch.ones(4, 1)).backward()
        opt_g.step()
    c = sink.check("update_first", "optimizer holds every parameter with a gradient")
    assert c["ok"], c  # at the first (the discriminator's) step only the discriminator has gradients
    assert sink.check("update_second", "gradients zeroed between updates")["ok"]
    later = sink.check("update_second", "optimizer holds every parameter with a gradient")
    assert not later["ok"] and "1.weight" in later["detail"] and "0.weight" not in later["detail"]


def test_evaluation_in_training_mode_fails(probe):
    _, sink = probe(steps=3, to_end=True)
    model, opt = model_and_opt(dropout=True)
    loop(model, opt, steps=4, eval_mode=False)
    g = sink.gates["validation"]
    assert g["verdict"] == "fail" and "model.eval()" in sink.check("validation", "eval mode")["detail"]
    assert sink.check("validation", "no grad")["ok"]  # the loss module (no parameters) is not counted


def test_a_model_no_module_of_which_reads_the_mode_makes_the_mode_checks_not_applicable(probe):
    """No dropout, no batch norm: evaluating in training mode (and training on in eval mode) changes nothing."""
    _, sink = probe(steps=3, to_end=True)
    model, opt = model_and_opt()
    loop(model, opt, steps=4, eval_mode=False)
    c = sink.check("validation", "eval mode")
    assert c.get("na") and "no dropout, no batch norm" in c["detail"] and "2 of 2" in c["detail"], c
    assert sink.gates["validation"]["verdict"] == "pass"


def test_dropout_of_zero_is_measured_as_changing_nothing_and_the_rerun_leaves_the_script_s_state(probe):
    """Dropout(p=0.2) in a class of the script's own whose forward reads self.training, set to 0 by the script:
    the code says the mode may matter, the first training batch run again in eval mode says it does not; the
    rerun leaves the random stream, the modes and the buffers as they were."""

    class Noisy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.p = nn.Linear(8, 3), 0.0
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return nn.functional.dropout(self.lin(x), self.p, self.training)

    _, sink = probe(steps=2, to_end=True)
    torch.manual_seed(0)
    model = Noisy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    crit(model(x), y).backward()
    after = torch.rand(())  # the next draw of the script's own random stream: the rerun must not have moved it
    torch.manual_seed(0)
    expected = (Noisy(), torch.randn(4, 8), torch.randint(0, 3, (4,)), torch.rand(()))[3]
    assert torch.equal(after, expected) and float(model.calls) == 1 and model.training
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        model(torch.randn(5, 8))  # evaluated in training mode
    crit(model(x), y).backward()
    opt.step()
    c = sink.check("validation", "eval mode")
    assert c.get("na") and "the same in eval mode as in training mode" in c["detail"], c


def test_sampling_between_steps_is_not_an_evaluation(probe):
    """Tokens generated one by one under inference_mode with the model in training mode (dropout on): no
    evaluation, so no eval-mode failure; the real evaluation after it, under model.eval(), is the one measured."""
    _, sink = probe(steps=2, to_end=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(11, 8), nn.Dropout(0.1), nn.Linear(8, 11))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()
    for step in range(1, 7):
        x = torch.randint(0, 11, (4, 5))
        crit(model(x).flatten(0, 1), x.flatten()).backward()
        opt.step()
        opt.zero_grad()
        if step == 2:
            with torch.inference_mode():
                idx = torch.zeros(1, 1, dtype=torch.long)
                for _ in range(6):
                    nxt = model(idx[:, -4:])[:, -1].argmax(-1, keepdim=True)
                    idx = torch.cat([idx, nxt], dim=1)
        if step == 4:
            model.eval()
            with torch.no_grad():
                model(torch.randint(0, 11, (4, 5)))
            model.train()
    g = sink.gates["validation"]
    assert g["verdict"] == "pass" and g["inputs"]["step"] == 4 and g["inputs"]["forwards"] == 1, g
    assert any("6 forward passes generated tokens one by one" in str(m) for m in sink.msgs), "sampling not logged"


def bn_net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    for name, p in net.named_parameters():
        if not name.startswith("1."):  # every layer but the BatchNorm frozen, the head too (pytorch-forum-84911)
            p.requires_grad_(False)
    return net


def bn_steps(net: nn.Module, opt: torch.optim.Optimizer) -> None:
    crit = nn.CrossEntropyLoss()
    for _ in range(3):
        opt.zero_grad()
        crit(net(torch.randn(4, 3, 8, 8)), torch.randint(0, 3, (4,))).backward()
        opt.step()


def test_only_batch_norm_training_is_named_with_its_share(probe):
    """The optimizer handed every parameter, a name filter froze all but BatchNorm: 2 of 6 tensors train."""
    _, sink = probe(steps=2, to_end=True)
    net = bn_net()
    bn_steps(net, torch.optim.Adam(net.parameters(), lr=1e-3))
    g = sink.gates["update_first"]
    c = sink.check("update_first", "what trains")
    assert g["verdict"] == "warn" and c["warn"] and "only the normalisation layers train (BatchNorm2d" in c["detail"]
    assert "2 of 6 tensors train, 8 of" in c["detail"] and "the last layer (4, Linear) is frozen too" in c["detail"]
    assert g["message"].startswith("what trains: only the normalisation layers train"), g["message"]
    t = sink.check("update_first", "targeted parameters changed")  # the frozen ones it holds are not "unchanged"
    assert t["ok"] and t["detail"].startswith("2/2 trainable tensors") and "also holds 4 frozen" in t["detail"], t


def test_an_optimizer_that_holds_only_frozen_tensors_fails(probe):
    """TrainCheck's own copy of pytorch-forum-84911: the optimizer holds only the (frozen) head."""
    _, sink = probe(steps=2, to_end=True)
    net = bn_net()
    bn_steps(net, torch.optim.Adam(net[4].parameters(), lr=1e-3))
    t = sink.check("update_first", "targeted parameters changed")
    assert not t["ok"] and "every one is frozen" in t["detail"] and "can change nothing" in t["detail"], t
    held = sink.check("update_first", "optimizer holds every parameter with a gradient")
    assert not held["ok"] and "1.weight" in held["detail"] and "1.bias" in held["detail"], held


def test_a_parameter_the_optimizer_does_not_hold(probe):
    _, sink = probe(steps=2, to_end=True)
    model = model_and_opt()[0]  # its optimizer is dropped: only this one holds parameters
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)  # the first layer requires grad but is in no group
    loop(model, opt, steps=3, eval_after=0)
    c = sink.check("update_first", "optimizer holds every parameter with a gradient")
    assert not c["ok"] and "0.weight" in c["detail"] and "receive gradients but no optimizer holds them" in c["detail"]
    assert sink.check("update_first", "optimizer state allocated")["detail"].endswith("(plain SGD keeps none)")


def test_a_warm_up_from_zero_is_checked_on_the_later_steps(probe):
    _, sink = probe(steps=3, to_end=True)
    model, opt = model_and_opt()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 2)  # lr 0 at the first step (Hugging Face's default)
    loop(model, opt, steps=4, eval_after=0, sched=sched)
    first = sink.check("update_first", "targeted parameters changed")
    assert first["warn"] and not first["ok"] and "learning rate is 0" in first["detail"]
    later = sink.check("update_second", "targeted parameters changed")
    assert later["ok"] and later["detail"].startswith("3/3")
    assert sink.gates["update_first"]["verdict"] == "warn"


def test_a_non_finite_loss_ends_the_script_as_diverged(probe):
    inst, sink = probe(steps=3)
    model, opt = model_and_opt()
    why = loop(model, opt, nan=True)
    assert "non-finite loss" in why and inst.obs.diverged == {"phase": "forward", "value": "nan", "step": 1}
    assert not sink.check("forward", "finite loss")["ok"] and sink.gates["forward"]["verdict"] == "fail"
    inst.at_exit()
    assert sink.msgs[-1]["msg"] == "exit" and sink.msgs[-1]["how"] == "diverged"


def test_the_resumed_process_reports_loads_and_steps(probe, tmp_path):
    model, opt = model_and_opt()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "ck.pt")
    inst, sink = probe(mode="resume", compare_steps=2)
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    model.load_state_dict(state["model"])
    why = loop(model, opt, eval_after=0)
    assert why == "the resumed script ran 2 steps"
    assert [s["phase"] for s in sink.events(ev.STEP)] == ["resume", "resume"]
    assert not sink.gates  # no phases in the resumed process: the run process judges it
    inst.at_exit()
    exit_ = sink.msgs[-1]
    assert exit_["loaded"] == [str(tmp_path / "ck.pt")] and exit_["mem"]["rss_peak"] > 0


def test_watching_to_the_end_never_stops_the_script(probe, tmp_path):
    inst, sink = probe(steps=2, to_end=True)
    model, opt = model_and_opt()
    assert loop(model, opt, steps=25, path=tmp_path / "ck.pt") == ""
    inst.at_exit()
    assert sink.msgs[-1]["how"] == "ended" and sink.msgs[-1]["step"] == 25
    losses = [s["loss"] for s in sink.events(ev.STEP)]
    assert len(losses) == 25 and losses[9] is not None and losses[10] is None  # read while watched, then every 10th


def test_hooks_leave_the_submodules_after_the_first_step_and_are_removed(probe):
    from torch.nn.modules import module as mm

    orig_save, orig_backward = torch.save, torch.autograd.backward
    inst, _ = probe(steps=5, to_end=True)
    assert torch.save is not orig_save and torch.autograd.backward is not orig_backward
    assert len(mm._global_forward_pre_hooks) == 1
    model, opt = model_and_opt()
    loop(model, opt, steps=1, eval_after=0)
    assert len(mm._global_forward_pre_hooks) == 0 and not model._forward_pre_hooks  # the root's class watches it
    assert "__call__" in nn.Sequential.__dict__
    inst.uninstall()
    assert torch.save is orig_save and torch.autograd.backward is orig_backward
    assert "__call__" not in nn.Sequential.__dict__ and not mm._global_forward_hooks
    assert torch.optim.Optimizer.__init__.__module__ == "torch.optim.optimizer"
    assert torch.utils.data.DataLoader.__init__.__module__ == "torch.utils.data.dataloader"
    assert not sys.modules["torch.optim.optimizer"]._global_optimizer_pre_hooks


def test_nothing_of_cockpit_stays_on_the_users_objects(probe, tmp_path):
    """After the first steps (the roots watched from then on): the model pickles to the same bytes as an
    untouched twin, deep-copies, scripts, and keeps no hook (issue 26: '_thread.lock' could not be pickled)."""
    import copy
    import io

    def trained() -> tuple[nn.Module, torch.optim.Optimizer]:
        model, opt = model_and_opt()
        loop(model, opt, steps=3, eval_after=2)
        return model, opt

    def saved(obj: Any) -> bytes:
        buf = io.BytesIO()
        torch.save(obj, buf)
        return buf.getvalue()

    inst, sink = probe(steps=5, to_end=True)
    model, opt = trained()
    assert inst.obs.step == 3
    assert not model._forward_pre_hooks and not model._forward_hooks and not model._forward_hooks_with_kwargs
    probed = (saved(model), saved(opt.state_dict()), saved(list(model.parameters())), saved(opt))
    copy.deepcopy(opt)
    twin = copy.deepcopy(model)
    assert not twin._forward_hooks and torch.equal(twin(torch.ones(1, 8)), model(torch.ones(1, 8)))
    torch.jit.script(model)
    torch.save(model, tmp_path / "whole.pt")
    assert torch.load(tmp_path / "whole.pt", weights_only=False)(torch.ones(1, 8)).shape == (1, 3)
    assert "__call__" in nn.Sequential.__dict__  # the roots are watched through their class
    inst.uninstall()
    torch.manual_seed(0)  # the same run without the probe: the same bytes
    model2, opt2 = trained()
    assert probed == (saved(model2), saved(opt2.state_dict()), saved(list(model2.parameters())), saved(opt2))


def test_an_exception_raised_in_cockpits_own_frames_ends_the_script_as_cockpits(probe, monkeypatch):
    """Not caught by a hook's guard (raised in a wrapper, say): the exit says 'internal', so the run ends as
    a bug in Cockpit (exit 6), never as the script's error."""
    from cockpit.probe import reading

    inst, sink = probe(steps=3)
    try:
        reading.short_list(None)  # type: ignore[arg-type]  # raises TypeError inside Cockpit's code
    except TypeError as exc:
        monkeypatch.setattr(sys, "last_exc", exc, raising=False)
    inst.at_exit()
    assert sink.msgs[-1]["msg"] == "internal" and "TypeError" in sink.msgs[-1]["error"]
    w = watched(internal=sink.msgs[-1]["error"], returncode=1)
    out, _ = judge.outcome(w, "train.py")
    assert out.code == ev.ExitCode.INTERNAL and "a bug in Cockpit" in out.reason


def test_a_failure_inside_the_instrumentation_is_cockpits_not_the_scripts(probe, monkeypatch):
    inst, sink = probe(steps=3)
    monkeypatch.setattr(inst.obs, "_stack", lambda *a: 1 / 0)
    model, opt = model_and_opt()
    loop(model, opt, steps=3, eval_after=0)  # the script runs on, unobserved
    internal = [m for m in sink.msgs if m["msg"] == "internal"]
    assert internal and "ZeroDivisionError" in internal[0]["error"] and inst.dead
    assert torch.save.__module__ == "torch.serialization"  # every hook removed


# --------------------------------------------------------------------------- the judge


def watched(**kw: Any) -> judge.Watched:
    w = judge.Watched(mode="probe", argv=["python", "train.py"], hello={"pid": 1})
    for k, v in kw.items():
        setattr(w, k, v)
    return w


PASSING = {p: {"phase": p, "verdict": "pass"} for p in ("stack", "forward", "backward", "update_first")}


@pytest.mark.parametrize(
    ("kw", "status", "code", "words"),
    [
        ({"exit": {"how": "stopped", "reason": "stopped by the probe"}, "returncode": 0, "gates": PASSING},
         "passed", 0, "every gate passed; stopped by the probe"),
        ({"exit": {"how": "ended", "step": 558}, "returncode": 0,
          "gates": {**PASSING, "validation": {"verdict": "skipped"}, "save": {"verdict": "skipped"}}},
         "passed", 0, "every gate it saw passed; not seen, so not vouched for: validation, save"),
        ({"exit": {"how": "stopped"}, "returncode": 0, "gates": {**PASSING, "save": {"verdict": "fail"}}},
         "failed", 1, "gate failed: save"),
        ({"exit": {"how": "exception", "exception": {"type": "ValueError", "message": "bad", "frame": "train.py:3 in main"}},
          "returncode": 1, "open": "backward"}, "error", 5, "train.py raised ValueError: bad in backward (train.py:3 in main)"),
        ({"exit": {"how": "exception", "exception": {"type": "OutOfMemoryError", "message": "CUDA out of memory", "oom": True}},
          "returncode": 1, "open": "update_first"}, "oom", 3, "out of memory in update_first"),
        ({"exit": {"how": "diverged", "diverged": {"phase": "forward", "step": 1, "value": "nan"}}, "returncode": 0},
         "diverged", 4, "non-finite loss in forward at step 1 (nan)"),
        ({"returncode": -9, "open": "update_second"}, "crashed", 9, "killed (SIGKILL) during update_second"),
        ({"returncode": -15, "open": "save"}, "stopped", 7, "stopped by SIGTERM from outside during save"),
        ({"returncode": -11, "open": "forward"}, "error", 5, "died of SIGSEGV during forward"),
        ({"exit": {"how": "ended"}, "returncode": 3, "last_phase": "validation"}, "error", 5, "exited with status 3"),
        ({"exit": {"how": "ended"}, "returncode": 0}, "failed", 1, "without a training step"),
        ({"hello": None, "returncode": 0}, "error", 2, "without loading Cockpit's probe"),
        ({"spawn_error": "FileNotFoundError: No such file"}, "error", 2, "cannot start `python train.py`"),
        ({"internal": "KeyError: 'x'", "returncode": -15}, "error", 6, "internal error in Cockpit's probe"),
        ({"exit": {"how": "stopped"}, "stopping": "stopped", "killed_by_probe": "did not exit", "returncode": -15,
          "gates": PASSING}, "passed", 0, "every gate passed"),
    ],
)  # fmt: skip
def test_how_the_script_ended_is_the_runs_outcome(kw, status, code, words):
    outcome, _ = judge.outcome(watched(**kw), "train.py")
    assert (outcome.status.value, int(outcome.code)) == (status, code)
    assert words in outcome.reason


def test_a_killed_script_fails_the_phase_it_was_in():
    _, gate_ = judge.outcome(watched(returncode=-9, open="backward"), "train.py")
    assert gate_ is not None and gate_["phase"] == "backward" and gate_["verdict"] == "fail"
    assert gate_["checks"][0]["name"] == "script alive" and "dmesg" in gate_["remedy"]


# --------------------------------------------------------------------------- the resume check


def steps(*rows: tuple[int, float, float]) -> list[dict[str, Any]]:
    return [{"step": s, "opt_step": float(s), "lr": lr, "loss": loss} for s, lr, loss in rows]


def pair(resumed: list[dict[str, Any]], loaded: list[str], saved_at: int = 4) -> tuple[judge.Watched, judge.Watched]:
    first = watched(
        steps=steps((4, 1e-3, 2.0), (5, 9e-4, 1.9), (6, 8e-4, 1.8)),
        exit={"saves": [{"step": saved_at, "files": ["/x/ck.pt"]}]},
    )
    second = watched(steps=resumed, exit={"loaded": loaded, "seconds": 1.0, "mem": mem()})
    return first, second


def test_a_resume_that_restores_everything_passes():
    first, second = pair(steps((5, 9e-4, 1.9), (6, 8e-4, 1.8)), ["/x/ck.pt"])
    g = resume.gate(first, second, 2, exact=True)
    assert g.verdict.value == "pass", g.checks
    assert [c["name"] for c in g.checks] == [
        "new process",
        "checkpoint loaded",
        "step restored",
        "learning rate restored",
        "next losses equal the uninterrupted run",
    ]
    assert resume.payload(g, second)["mem"]["rss_peak"] > 0


@pytest.mark.parametrize(
    ("resumed", "loaded", "failing"),
    [
        (steps((1, 9e-4, 1.9), (2, 8e-4, 1.8)), ["/x/ck.pt"], "step restored"),  # optimizer state not restored
        (steps((5, 1e-3, 1.9), (6, 1e-3, 1.8)), ["/x/ck.pt"], "learning rate restored"),  # scheduler not restored
        (steps((5, 9e-4, 1.95), (6, 8e-4, 1.8)), ["/x/ck.pt"], "next losses equal the uninterrupted run"),
        (steps((5, 9e-4, 1.9), (6, 8e-4, 1.8)), ["/elsewhere.pt"], "checkpoint loaded"),
    ],
)
def test_a_resume_that_loses_state_fails_the_check_that_says_which(resumed, loaded, failing):
    first, second = pair(resumed, loaded)
    g = resume.gate(first, second, 2, exact=True)
    assert [c["name"] for c in g.failures()] == [failing]


def test_on_a_gpu_losses_agree_within_a_tolerance():
    first, second = pair(steps((5, 9e-4, 1.9 + 1e-7), (6, 8e-4, 1.8)), ["/x/ck.pt"])
    assert resume.gate(first, second, 2, exact=False).verdict.value == "pass"
    assert resume.gate(first, second, 2, exact=True).verdict.value == "fail"


# --------------------------------------------------------------------------- the notebook's [probe]


def test_probe_table_round_trips_and_is_written_only_once_set(demo_text):
    nb = nbm.parse(demo_text)
    assert nb.probe is None and "[probe]" not in nbm.dumps(nb)
    text = demo_text + '\n[probe]\ncommand = ["python", "train.py", "--lr", "3e-4"]\nenv = { OMP_NUM_THREADS = "2" }\n'
    nb = nbm.parse(text + 'resume = ["python", "train.py", "--resume"]\nsteps = 7\nto_end = true\n')
    assert nb.probe is not None and nb.probe.command[-1] == "3e-4" and nb.probe.steps == 7 and nb.probe.to_end
    again = nbm.parse(nbm.dumps(nb))
    assert again.probe == nb.probe


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("steps = 1", "probe.steps"),
        ("steps = 10000000", "probe.steps"),
        ('env = { "2BAD" = "x" }', "probe.env.2BAD"),
        ("env = { N = 2 }", "probe.env.N"),
        ('resume = ["python", ""]', "probe.resume[1]"),
        ("compare_steps = 0", "probe.compare_steps"),
        ("resume = [1, 2]", "probe.resume[0]"),
        ("stepz = 3", "probe.stepz"),
    ],
)
def test_bad_probe_values_are_refused_naming_the_key(demo_text, extra, key):
    with pytest.raises(nbm.NotebookError) as err:
        nbm.parse(demo_text + f'\n[probe]\ncommand = ["python", "t.py"]\n{extra}\n')
    assert key in str(err.value)


# --------------------------------------------------------------------------- the command line


def test_probe_without_a_command_or_with_a_missing_program_is_one_paragraph(campaign, capsys):
    assert cli.main(["probe", str(campaign)]) == 2
    err = capsys.readouterr().err
    assert "no command to probe: give one after --" in err and "Traceback" not in err
    assert cli.main(["probe", str(campaign), "--", "no-such-program-xyz", "train.py"]) == 2
    assert "'no-such-program-xyz' was not found on PATH" in capsys.readouterr().err
    assert nbm.load(campaign).probe is None and not (campaign / "runs").exists()  # nothing written
    assert cli.main(["runs", str(campaign), "--", "python"]) == 2
    assert "takes no command after --" in capsys.readouterr().err


def test_the_command_after_the_double_dash_is_recorded_in_probe(campaign, monkeypatch):
    from cockpit.commands import probe as cmd

    started = {}

    def fake_new_run(path, variant, seed, **kw):
        started.update(kw)
        raise SystemExit(0)  # stop before any process starts

    monkeypatch.setattr(cmd.launch, "new_run", fake_new_run)
    with pytest.raises(SystemExit):
        cli.main(
            ["probe", str(campaign), "--steps", "3", "--resume", f"{sys.executable} t.py --resume", "--env", "A=1", "--",
             sys.executable, "t.py", "--lr", "3"]
        )  # fmt: skip
    spec = nbm.load(campaign).probe
    assert spec is not None and spec.command == [sys.executable, "t.py", "--lr", "3"] and spec.steps == 3
    assert spec.resume[-1] == "--resume" and spec.env == {"A": "1"}
    frozen = started["extra"]["probe"]
    assert started["kind"] == "probe" and frozen["command"] == spec.command and frozen["cwd"] == os.getcwd()


# --------------------------------------------------------------------------- readers of a probed run


def probe_gates(gpu: bool) -> list[dict[str, Any]]:
    m = mem(900, 900, 1600) if gpu else mem(rss_mib=400)
    stack = gpu_stack() if gpu else cpu_stack()
    return [
        gate("stack", m, {"device": "cuda:0" if gpu else "cpu", "script_pid": 7}, stack=stack),
        gate("forward", m, {"microbatch": 4, "shapes": {"input_ids": [4, 16]}}),
        gate("backward", m, {"microbatch": 4}),
        gate("update_first", m, {"microbatches": 2, "optimizer": "AdamW"}),
        gate(
            "update_second",
            mem(1200, 1200, 1900) if gpu else m,
            {"timed_updates": 4},
            duration_s=2.0,
            step_time={"median": 0.5, "min": 0.45, "max": 0.55, "n": 4},
        ),
        gate("validation", m, {"forwards": 2}, duration_s=3.0),
        gate("save", m, {"files": ["ck.pt"]}, duration_s=1.5, bytes=123 * 2**20),
    ]


def test_a_passed_probe_sizes_and_times_a_variant_but_never_clears_a_series(tmp_path):
    from cockpit import plan as planm
    from cockpit import sheet as sh
    from cockpit.compare import pilot_memory

    c = make_campaign(tmp_path)
    rid, _ = write_run(c, kind="probe", stack=cpu_stack(), gates=probe_gates(gpu=True), reason="probe of t.py: ok")
    nb = nbm.load(c)
    all_runs = runs.campaign_runs(c)
    ref = nb.reference.id
    assert runs.latest_measured(all_runs, ref).id == rid  # type: ignore[union-attr]
    assert runs.latest_passed_pilot(all_runs, ref) is None  # a series trains the task: it needs a pilot of it
    assert runs.training_runs(all_runs) == []
    assert all_runs[0].probed and all_runs[0].stack["device"] == "cuda:0"  # the script's stack, from its gate
    s = sh.build(nb, all_runs=all_runs)
    assert s.run_id == rid and s.measured_gpu and s.peak_reserved_mib == pytest.approx(1200)
    assert s.microbatch == 4 and s.accumulation == 2 and s.precision == "the script's own"
    text = "\n".join(sh.render(s))
    assert f"from probe {rid}" in text and "a probe does not run the longest batch" in text
    t = planm.measure(all_runs, ref)
    assert t.step_s == 0.5 and t.step_source.startswith(f"probe {rid}: median of 4 timed steps of the script")
    assert t.eval_s == 3.0 and t.save_s == 1.5 and t.checkpoint_bytes == 123 * 2**20
    pm = pilot_memory(nb, ref, all_runs)
    assert pm.kind == "probe" and pm.run == rid and "probe" in pm.params_note and pm.step_time_s == 0.5
    row = nb.run(rid)
    assert row.kind == "probe" and row.status == "passed"


def test_runs_lists_a_probe_as_such(tmp_path, capsys):
    c = make_campaign(tmp_path)
    write_run(c, kind="probe", gates=probe_gates(gpu=False), reason="probe of t.py: every gate passed")
    assert cli.main(["runs", str(c), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["kind"] == "probe" and row["status"] == "passed" and row["stop_reason"].startswith("probe of t.py")


def test_a_file_saved_before_training_is_no_checkpoint(probe, tmp_path):
    _, sink = probe(steps=2)
    model, opt = model_and_opt()
    torch.save({"hidden": 16}, tmp_path / "config.pt")  # before the first step: not what resuming needs
    why = loop(model, opt, eval_after=0, save_after=3, path=tmp_path / "ck.pt")
    assert why.endswith("one save (at step 3)")
    assert sink.gates["save"]["inputs"]["files"] == ["ck.pt"]


def test_a_scripts_layer_kept_in_a_plain_list_is_named_at_backward(probe, tmp_path):
    """The layer runs in forward and gets a gradient, but model.parameters() (so the optimizer and state_dict)
    never sees it: named where the model holds it, never a pass."""

    class Listed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(8, 16)
            self.hidden = [nn.Linear(16, 16)]  # the mistake: nn.ModuleList registers it
            self.out = nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.relu(self.hidden[0](torch.relu(self.inp(x)))))

    _, sink = probe(steps=3)
    torch.manual_seed(0)
    model = Listed()
    loop(model, torch.optim.AdamW(model.parameters(), lr=1e-2), path=tmp_path / "ck.pt")
    c = sink.check("backward", "every trained tensor is registered")
    assert not c["ok"] and "hidden[0].weight [16, 16]" in c["detail"] and "never updates them" in c["detail"], c
    ok_probe = sink.check("backward", "frozen parameters get no gradient")
    assert ok_probe["ok"], ok_probe


def test_a_scripts_registered_model_passes_the_registration_check(probe, tmp_path):
    _, sink = probe(steps=3)
    model, opt = model_and_opt()
    loop(model, opt, path=tmp_path / "ck.pt")
    c = sink.check("backward", "every trained tensor is registered")
    assert c["ok"] and not c.get("na"), c
