"""``cockpit estimate``: the pilot's phases traced on fake tensors, checked on the CPU with tiny models.

The trace on fake tensors must agree with the same training run on real CPU tensors under the same (CPU)
semantics, measured by the same dispatch counter; the GPU model (autocast's CUDA policy, the attention kernel,
the allocator's rounding) is checked piece by piece; the table, the refusals and the CPU fallback for an operation
fake tensors cannot run are checked end to end.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel

from cockpit import cli
from cockpit import notebook as nbm
from cockpit.errors import UsageError
from cockpit.estimate import campaign, gpu, report, trace
from cockpit.estimate.allocator import MIB, CachingAllocator, expandable_segments
from cockpit.estimate.counter import Counter
from cockpit.pilot.task import Task
from cockpit.pilot.usercode import UserCodeError

HERE = Path(__file__).parents[1] / "estimate"
sys.path.insert(0, str(HERE))

TINY = dict(vocab=256, block=64, min_length=16, layers=2, heads=2, d=32, lr=1e-3, n_train=16)
SLICING = dict(vocab=512, block=128, layers=2, heads=2, d=64, lr=1e-3)  # tests/estimate/slicing_task.py


# --------------------------------------------------------------------------- the trace against a real run


# --------------------------------------------------------------------------- the GPU model


def test_cuda_autocast_policy_and_cast_cache() -> None:
    sem = gpu.CudaSemantics()
    with FakeTensorMode(), sem:
        x = torch.randn(4, 8)
        w = nn.Parameter(torch.randn(8, 8))
        with sem.autocast(torch.bfloat16):
            assert F.linear(x, w).dtype == torch.bfloat16
            assert (x @ w).dtype == torch.bfloat16
            assert F.layer_norm(x.bfloat16(), (8,)).dtype == torch.float32
            assert F.softmax(x.bfloat16(), -1).dtype == torch.float32
            assert F.cross_entropy(x.bfloat16(), torch.zeros(4, dtype=torch.long)).dtype == torch.float32
            assert F.gelu(x.bfloat16()).dtype == torch.bfloat16  # in no list: runs in its input's type
            assert len(sem.cache) == 1  # the weight was cast once for both matmuls
        assert not sem.cache  # leaving autocast frees the cached copies
        assert F.linear(x, w).dtype == torch.float32  # outside autocast nothing is cast


def test_cross_entropy_decomposes_as_on_cuda() -> None:
    """CUDA autocast lists no cross_entropy (CPU's float32 list does): log_softmax stays bfloat16 and nll_loss
    keeps a float32 copy, 6 bytes per logit held for backward, not the 4 of a float32 log_softmax."""
    sem = gpu.CudaSemantics()
    n, v = 64, 1000
    with FakeTensorMode() as fm:
        logits = torch.randn(n, v, dtype=torch.bfloat16, requires_grad=True)
        target = torch.zeros(n, dtype=torch.long)
        c = Counter(fake_mode=fm)
        with c, sem, sem.autocast(torch.bfloat16):
            before = c.live
            loss = F.cross_entropy(logits, target)
            held = c.live - before
    assert loss.dtype == torch.float32
    copy = loss.grad_fn.next_functions[0][0]
    assert type(copy).__name__ == "ToCopyBackward0"
    assert type(copy.next_functions[0][0]).__name__ == "LogSoftmaxBackward0"
    assert 6 * n * v <= held <= 6 * n * v + 8 * 1024, held


def test_attention_kernel_choice_and_its_memory() -> None:
    def peak(dtype: torch.dtype, mask: bool) -> tuple[str, int]:
        sem = gpu.CudaSemantics()
        with FakeTensorMode() as fm:
            q = torch.randn(2, 4, 256, 32, dtype=dtype, requires_grad=True)
            m = torch.ones(256, 256, dtype=torch.bool) if mask else None
            c = Counter(fake_mode=fm)
            with c, sem:
                c.begin("attention")
                out = F.scaled_dot_product_attention(q, q, q, attn_mask=m)
                out.sum().backward()
                c.end()
        return next(iter(sem.kernels)), c.segments[0].peak_allocated

    flash, flash_peak = peak(torch.bfloat16, False)
    eff, eff_peak = peak(torch.float32, False)
    assert (flash, eff) == ("flash", "efficient")
    scores = 2 * 4 * 256 * 256  # the T x T scores a math kernel keeps
    assert flash_peak < scores * 2  # O(T): far below one bf16 copy of the scores
    with sdpa_kernel([SDPBackend.MATH]):
        math_kind, math_peak = peak(torch.bfloat16, False)
    assert math_kind == "math"
    assert math_peak >= scores * 2 + flash_peak  # the scores (bf16) are held for backward


def test_allocator_rounding_segments_and_reuse() -> None:
    a = CachingAllocator()
    assert a.malloc(1, 1) == 512 and a.reserved == 2 * MIB  # small pool: a 2 MiB segment
    a.malloc(2, 5 * MIB)
    assert a.reserved == 22 * MIB  # a large request under 10 MiB gets a 20 MiB segment
    a.malloc(3, 11 * MIB)
    assert a.reserved == 22 * MIB  # the segment's free 15 MiB holds it
    a.malloc(4, 11 * MIB + 1)
    assert a.reserved == 34 * MIB  # no room left: a segment of the request rounded up to 2 MiB
    a.free(4)
    a.malloc(5, 12 * MIB)  # the cached 12 MiB block is reused
    assert a.reserved == 34 * MIB
    assert a.allocated == 512 + 5 * MIB + 11 * MIB + 12 * MIB
    a.free(2)
    a.free(3)
    a.malloc(6, 19 * MIB)  # the freed neighbours merged back into one 20 MiB block
    assert a.reserved == 34 * MIB and a.segments == 3


def test_expandable_segments_grow_in_pages() -> None:
    """expandable_segments:True: one segment per pool that grows at its end in pages (2 MiB small, 20 MiB large),
    where fixed segments would add one per request that found no room."""
    a = CachingAllocator(expandable=True)
    assert a.malloc(1, 1) == 512 and a.reserved == 2 * MIB  # the small pool maps its first 2 MiB page
    a.malloc(2, 5 * MIB)
    assert a.reserved == 22 * MIB  # the large pool's first 20 MiB page
    a.malloc(3, 11 * MIB)
    assert a.reserved == 22 * MIB  # inside the mapped page, as in a fixed segment
    a.malloc(4, 11 * MIB + 1)
    assert a.reserved == 42 * MIB  # grown at the end: 27 MiB + 1 B used, mapped to 40 MiB (fixed: 34 MiB)
    a.malloc(5, 12 * MIB)
    assert a.reserved == 42 * MIB  # the grown page's free 12 MiB and a bit hold it (fixed: a 12 MiB segment more)
    a.free(5)
    a.free(4)
    a.malloc(6, 30 * MIB)  # the free end (24 MiB from 16 MiB on) extended, not a new segment
    assert a.reserved == 2 * MIB + 60 * MIB and a.segments == 2
    f = CachingAllocator()
    for key, n in enumerate([1, 5 * MIB, 11 * MIB, 11 * MIB + 1, 12 * MIB]):
        f.malloc(key, n)
    assert f.reserved == 46 * MIB  # the same requests in fixed segments


def test_expandable_segments_are_read_from_the_allocators_configuration() -> None:
    assert expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"})
    assert expandable_segments({"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert not expandable_segments({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})
    assert not expandable_segments({})


# --------------------------------------------------------------------------- the host and the device


def test_the_batch_reaches_the_device_as_to_cuda_copies_it() -> None:
    """Issue 38: ``Tensor.to("cuda")`` keeps a dense tensor's strides and makes any other contiguous, copying only
    what it views; pinned host memory and the collate's own tensors are the host's, never counted."""
    with FakeTensorMode(allow_non_fake_inputs=True) as fm:
        c = Counter(fake_mode=fm)
        with c:
            with c.host():
                t = torch.zeros(8, 1025, dtype=torch.long).pin_memory()  # the collate's tensor, pinned
                labels = t[:, 1:]
                rows = t[:4]  # dense: a view of half the storage
                image = torch.zeros(2, 3, 4, 5).permute(0, 2, 3, 1)  # dense, channels-last strides
            assert c.live == 0  # nothing on the device yet
            with c.device():
                held = [gpu.device_copy(x) for x in (labels, rows, image)]
            assert held[0].stride() == (1024, 1) and held[0].is_contiguous()
            assert held[1].stride() == (1025, 1)
            assert held[2].stride() == image.stride()
            assert c.live == 8 * 1024 * 8 + 512 * ((4 * 1025 * 8 + 511) // 512) + 512
            assert not c.on_host(held[0]) and c.on_host(labels)
            assert t.add_(1) is t and c.live == 8 * 1024 * 8 + 33280 + 512  # a host tensor stays the host's


def test_a_sliced_collate_estimates_as_the_device_holds_it() -> None:
    """The collate nanoGPT users write (``labels = t[:, 1:]``) with a model calling ``targets.view(-1)``: it runs on a
    GPU, where the copy to the device makes the slice contiguous, so the estimate must trace it (it refused)."""
    import slicing_task

    params = {**SLICING, "microbatch": 4, "accumulation": 1, "precision": "fp32"}
    t = trace.run(slicing_task.task, params, gpu_semantics=True)
    assert [p.name for p in t.phases] == list(trace.PHASES)
    with pytest.raises(UserCodeError, match=r"loss raised .*view"):  # on the CPU the copy is none: view refuses
        trace.run(slicing_task.task, params, gpu_semantics=False)


def test_the_model_is_built_on_the_host_and_moved() -> None:
    """What ``Module.to("cuda")`` leaves on the device: a parameter that views a larger construction tensor holds
    only its own elements, and the construction's temporaries are the host's."""

    class Sliced(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            scratch = torch.randn(4096, 16)  # a construction temporary, 256 KiB: never on the device
            self.lin = nn.Linear(16, 16)
            self.lin.weight = nn.Parameter(scratch[:16])  # a view of 16 of its 4,096 rows

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.mse_loss(self.lin(x), y)

    task = _op_task(scale)
    task.build_model = lambda p: Sliced()
    task.loss = lambda m, b: m(b["x"], b["y"])
    params = {"microbatch": 4, "lr": 1e-3, "precision": "fp32"}
    on_gpu = trace.run(task, params, gpu_semantics=True)
    on_cpu = trace.run(task, params, gpu_semantics=False)
    assert on_cpu.phase("forward").peak_allocated >= 4096 * 16 * 4  # the CPU is host and device: all of it counts
    assert on_gpu.phase("forward").peak_allocated < 16 * 1024  # the weight's 1 KiB, the bias, the batch, the forward


# --------------------------------------------------------------------------- the table


def _trace(m: int, reserved_mib: float) -> trace.Trace:
    ph = trace.PhaseMemory("update_second", "", int(reserved_mib * MIB), int(reserved_mib * MIB), 0)
    return trace.Trace(m, True, True, [ph], 1, 1, 0.0)


def test_table_largest_microbatch_with_headroom() -> None:
    # 1,000 MiB per example above 2,000 MiB; context and libraries added; 10 % headroom
    main, other = _trace(8, 10_000 - 32), _trace(4, 6_000 - 32)  # + the cuBLAS workspace
    fits = report.fits(main, other, 0.1)
    assert [f.size_gb for f in fits] == [16, 24, 40, 48, 80, 94, 141]
    extra = gpu.CONTEXT_MIB + gpu.LIBRARIES_MIB
    for f in fits:
        cap = f.size_gb * 1e9 / MIB
        best = f.largest_microbatch
        assert best is not None
        assert (2_000 + 1_000 * best + extra) * 1.1 <= cap < (2_000 + 1_000 * (best + 1) + extra) * 1.1
        assert f.fits == ((10_000 + extra) * 1.1 <= cap)
    assert fits[0].fits and fits[0].largest_microbatch == 10  # (2,000 + 1,000 m + 1,382) x 1.1 <= 15,259 MiB
    assert report.fits(_trace(8, 400_000), _trace(4, 300_000), 0.1)[-1].largest_microbatch == 0  # not even 1


def test_table_longest_length_at_the_microbatch() -> None:
    """The second axis: the longest length at the campaign's microbatch, linear in the length between a trace at the
    campaign's max_length and one at half of it; every bound a number (issue 38)."""
    main, other, shorter = _trace(8, 10_000 - 32), _trace(4, 6_000 - 32), _trace(8, 4_000 - 32)
    fits = report.fits(main, other, 0.1, shorter=shorter, lengths=(1024, 512))
    extra = gpu.CONTEXT_MIB + gpu.LIBRARIES_MIB
    for f in fits:  # 6,000 MiB per 512 tokens above -2,000: (-2,000 + 11.72 L + extra) x 1.1 <= capacity
        cap = f.size_gb * 1e9 / MIB
        per = 6_000 / 512
        assert (
            (-2_000 + per * f.longest_length + extra) * 1.1
            <= cap
            < (-2_000 + per * (f.longest_length + 1) + extra) * 1.1
        )
        assert not f.length_at_least
    assert all((f.longest_length >= 1024) == f.fits for f in fits)  # fits at its length: longest >= it
    assert fits[0].longest_length < fits[-1].longest_length
    flat = report.fits(main, other, 0.1, shorter=_trace(8, 10_000 - 32), lengths=(1024, 512))
    assert all(f.length_at_least and f.longest_length == 1024 for f in flat if f.fits)
    e = report.Estimate("c", "v", 8, 1, "fp32", 1, 1, "adamw", [], "update_second", 3.0, 0.1, flat, [], length=1024,
                        second_length=512, length_param="block")  # fmt: skip
    table = "\n".join(report.render(e))
    assert "longest length (block) at microbatch 8" in table and "at least 1,024, the largest traced" in table
    assert " any" not in table.split("Fits (", 1)[1]
    assert report.bound(report.LIMIT, False, report.LIMIT) == f"more than {report.LIMIT:,}"


def test_the_length_parameter_is_found() -> None:
    import gpt_task

    assert campaign.length_param(gpt_task.task, {**TINY, "microbatch": 4}) == ("block", 64)
    assert campaign.length_param(_op_task(scale), {"microbatch": 4}) is None  # no max_length: one axis


def test_gpu_names() -> None:
    assert report.gpu_size("h100") == ("H100", 80)
    assert report.gpu_size("24GB") == ("24 GB", 24)
    with pytest.raises(ValueError, match="unknown GPU 'Z9'.*H200"):
        report.gpu_size("Z9")


# --------------------------------------------------------------------------- refusals and fallbacks


def _campaign(tmp_path: Path, task_text: str) -> nbm.Notebook:
    folder = tmp_path / "c"
    folder.mkdir()
    shutil.copy(HERE / "campaign.toml", folder / "campaign.toml")
    shutil.copy(HERE / "gpt_task.py", folder / "gpt_task.py")
    (folder / "gpt_task.py").write_text((folder / "gpt_task.py").read_text() + task_text)
    return nbm.load(folder)


def test_refuses_a_task_that_does_not_import(tmp_path: Path) -> None:
    nb = _campaign(tmp_path, "\nimport no_such_module_here\n")
    with pytest.raises(UsageError, match=r"gpt_task.py:\d+ in <module>: importing the task raised ModuleNotFoundError"):
        campaign.estimate(nb, second=False)


def test_cli_refusal_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nb = _campaign(tmp_path, "\nraise RuntimeError('broken on purpose')\n")
    assert cli.main(["estimate", str(nb.directory)]) == 2
    assert "broken on purpose" in capsys.readouterr().err


@torch.library.custom_op("cockpit_estimate_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    """A custom op with no fake kernel: fake tensors cannot run it."""
    return x * 2


scale.register_autograd(lambda ctx, grad: grad * 2)


class Scaled(nn.Module):
    def __init__(self, op: object):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.op = op

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.op(self.lin(x)), y)  # type: ignore[operator]


def _op_task(op: object) -> Task:
    data = [{"id": i, "x": torch.randn(16), "y": torch.randn(16)} for i in range(16)]
    return Task(
        build_model=lambda p: Scaled(op),
        datasets=lambda p: {"train": data, "val": data[:4]},
        collate=lambda ex, p: {"x": torch.stack([e["x"] for e in ex]), "y": torch.stack([e["y"] for e in ex])},
        loss=lambda m, b: m(b["x"], b["y"]),
    )


def test_custom_op_is_measured_on_the_cpu_and_said() -> None:
    params = {"microbatch": 4, "lr": 1e-3, "precision": "fp32"}
    t = trace.run(_op_task(scale), params)
    ops = {f.op: f for f in t.fallbacks}
    assert "cockpit_estimate_test.scale.default" in ops, t.fallbacks
    fb = ops["cockpit_estimate_test.scale.default"]
    assert fb.calls >= 3 and fb.output_bytes >= fb.calls * 4 * 16 * 4  # its (4, 16) float outputs, measured
    assert "fake" in fb.why.lower()
    rendered = "\n".join(report.render(report.build(t, None, campaign="c", variant="v", params=params, headroom=0.1)))
    assert "Measured on the CPU instead" in rendered and "cockpit_estimate_test.scale" in rendered


def test_data_dependent_shape_is_measured_on_the_cpu() -> None:
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            return F.mse_loss(h[y > 0], y[y > 0])  # boolean indexing: the output's size depends on the data

    task = _op_task(scale)
    task.build_model = lambda p: Masked()
    t = trace.run(task, {"microbatch": 4, "lr": 1e-3, "precision": "fp32"})
    assert any("nonzero" in f.why for f in t.fallbacks), t.fallbacks


def test_a_shape_error_is_the_tasks_not_a_fallback() -> None:
    from cockpit.pilot.usercode import UserCodeError

    task = _op_task(scale)
    task.build_model = lambda p: nn.Linear(15, 16)  # the batch has 16 features: a bug in the task
    task.loss = lambda m, b: F.mse_loss(m(b["x"]), b["y"])
    with pytest.raises(UserCodeError, match="loss raised RuntimeError") as got:
        trace.run(task, {"microbatch": 4, "lr": 1e-3, "precision": "fp32"})
    assert "cannot run on fake tensors" not in str(got.value)


def _trace_of(m: int, allocated_mib: float, reserved_mib: float) -> trace.Trace:
    ph = trace.PhaseMemory("update_second", "", int(allocated_mib * MIB), int(reserved_mib * MIB), 0)
    return trace.Trace(m, True, True, [ph], 1, 1, 0.0)


def test_a_small_model_gets_a_bound_never_any() -> None:
    """Issue 36: a small model's reserved memory stayed in one 2 MiB segment from microbatch 1 to 2, and every GPU
    said "largest microbatch: any". Allocated still grows: the bound follows it; where nothing grew, the bound is
    the largest microbatch traced, said as a lower bound."""
    grows = report.fits(_trace_of(2, 3.0, 4.0), _trace_of(1, 2.5, 4.0), 0.1)
    assert all(f.largest_microbatch > 2 and not f.at_least for f in grows)
    cap = grows[0].capacity_mib
    extra = gpu.CONTEXT_MIB + gpu.LIBRARIES_MIB
    best = grows[0].largest_microbatch
    reserved = report.rows(_trace_of(2, 3.0, 4.0))[0].reserved_mib  # the cuBLAS workspace included

    def need(m: int) -> float:
        return (reserved + 0.5 * (m - 2) + extra) * 1.1  # 0.5 MiB per example, as allocated grew

    assert need(best) <= cap < need(best + 1)
    flat = report.fits(_trace_of(2, 3.0, 4.0), _trace_of(1, 3.0, 4.0), 0.1)
    assert all(f.at_least and f.largest_microbatch == 2 for f in flat)
    e = report.Estimate("c", "v", 2, 8, "fp32", 1, 1, "adamw", [], "update_second", 3.0, 0.1, flat, [])
    table = "\n".join(report.render(e))
    assert "any" not in table.split("Fits (", 1)[1]
    assert "at least 2, the largest traced" in table


def test_the_trace_models_expandable_segments_when_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpt_task

    params = {**TINY, "microbatch": 4, "accumulation": 1, "precision": "fp32"}
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    grown = trace.run(gpt_task.task, params)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    fixed = trace.run(gpt_task.task, params)
    assert grown.expandable and not fixed.expandable
    assert any("expandable_segments:True" in m for m in report.modelled(grown))
    # the same blocks, so the same allocated; reserved is each pool's mapped pages, never below what is allocated
    assert [p.peak_allocated for p in grown.phases] == [p.peak_allocated for p in fixed.phases]
    assert all(p.peak_allocated <= p.reserved <= p.peak_allocated + 22 * MIB for p in grown.phases)


def test_fsdp_units_are_the_blocks_of_the_model_then_the_root() -> None:
    import torch

    from cockpit.estimate.strategy import units

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.experts = torch.nn.ModuleList([torch.nn.Linear(2, 2)])  # a list inside a block: in its unit

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Linear(2, 2)
            self.blocks = torch.nn.ModuleList([Block(), Block()])
            self.empty = torch.nn.ModuleList([torch.nn.ReLU()])  # no parameters: not a unit

    net = Net()
    got = units(net)
    assert got[-1] is net
    assert [id(m) for m in got[:-1]] == [id(b) for b in net.blocks]  # whole blocks, experts inside, as accelerate
    assert units(torch.nn.Linear(2, 2))[0].__class__ is torch.nn.Linear  # no list: the model is the one unit
