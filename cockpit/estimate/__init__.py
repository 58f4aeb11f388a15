"""Size the rental before renting: the pilot's phases traced at full size under fake tensors, on any machine.

``cockpit estimate CAMPAIGN`` builds the campaign's real model and runs the pilot's own training step
(:class:`cockpit.pilot.trainer.Trainer`: ``update``, ``evaluate``, ``state_dict``) on tensors that have shapes and
dtypes but no storage (``torch._subclasses.fake_tensor.FakeTensorMode``), counting every live storage the way the
CUDA caching allocator counts blocks. It predicts each phase's peak allocated, reserved and NVML-visible memory and
the largest microbatch that fits each common GPU size.

Feasibility (spike on torch 2.13.0+cpu, 2 shared CPU cores, December 2026)
------------------------------------------------------------------------------
* Fake tensors on device "cuda" exist on a CPU-only build (``torch.empty(..., device="cuda")`` under the mode), but
  nothing past that works: ``Tensor.to("cuda")`` and ``Module.to`` fail ("PyTorch is not linked with support for
  cuda devices": no CUDA device guard is registered; ``torch._C._ensureCUDADeviceGuardSet`` only helps a CUDA build
  with zero devices), random initialisers need a CUDA generator, and the first autograd node on a cuda tensor
  aborts the process (``AccumulateGrad`` asks the device guard for a stream; borrowing the CPU guard through the
  registry gets past that, then backward stops at "Cannot access accelerator device when none is available").
  So the trace runs on fake *cpu* tensors and the GPU's semantics are modelled on top (below), never assumed.
* ``torch.autocast("cuda", ...)`` on this build warns and disables itself (CUDA not available); forcing the TLS flag
  (``torch.set_autocast_enabled("cuda", True)``) changes nothing for cpu tensors, because the AutocastCUDA kernels
  only cast tensors that are on cuda. CUDA's autocast policy is therefore applied by :mod:`.gpu` from the op
  lists PyTorch documents for CUDA (lower precision: matmul, linear, conv, bmm, baddbmm, addmm, ...; float32:
  softmax, log_softmax, layer_norm, group_norm, the losses, exp/log/pow, sum/prod/cumsum, ...), with autocast's
  cast cache for leaf weights, and CPU autocast is not entered.
* SDPA on fake cpu tensors takes ``_scaled_dot_product_flash_attention_for_cpu`` (O(T) memory, like CUDA's flash
  kernel, but with CPU's conditions). :mod:`.gpu` decides as the CUDA dispatcher would (flash for fp16/bf16 without
  a mask and head dim <= 256, memory-efficient otherwise when it applies, math with the T x T scores when neither)
  and models the chosen kernel's saved tensors and backward workspace.
* Optimizer: ``AdamW(fused=True)`` traces (``_fused_adamw_`` has a meta kernel, no temporaries). Left at its
  defaults, AdamW takes the single-tensor path on cpu but the foreach path on cuda (one optimizer-state-sized
  temporary list): the estimate sets ``foreach`` as CUDA would and says so.
* ``float(loss)`` in the training step is a data-dependent read that fake tensors refuse; the counter answers it
  with 1 (True for a boolean, 0.0 for the fp16 grad scaler's found_inf) and counts how many values it invented (the pilot's checks on them are meaningless in an estimate).
* Time: nanoGPT-shaped GPT-2 124M (12 x 12 x 768, block 1024, vocab 50,304), AdamW fused, bf16 autocast,
  microbatch 8, two full training steps: 9 s traced (19 s with Python and torch start-up), 310 MB of RSS. With CPU
  semantics (CPU autocast, CPU SDPA) the trace peaks at 9,010 MiB allocated, 1.09x the 8,300 MiB measured on an
  H200.

Result (bench/estimate.py, same box)
------------------------------------
``cockpit estimate`` on that campaign takes 11 s wall here for the two GPU traces (the campaign's microbatch and half
of it, for the table) and 17 s with the third, CPU-semantics trace shown beside (2 shared CPUs), and predicts 8,275 MiB peak allocated in ``update_second`` (= ``worst_case``, every example is
1,024 long): 0.997x the H200's 8,300 MiB. What closed the gap is one GPU semantic: CUDA's autocast lists do not
include ``cross_entropy`` (CPU's float32 list does), so on CUDA ``log_softmax`` runs in bfloat16 and only
``nll_loss`` works on a float32 copy; CPU's way holds one more float32 (N x V) tensor at the start of backward
(786 MiB here). The other figures (reserved, NVML-visible, the other phases) are predictions not yet checked on a
GPU.

Modules: :mod:`.trace` (one trace of the pilot's phases), :mod:`.counter` (live storages by size, the CPU fallback),
:mod:`.allocator` (the caching allocator model), :mod:`.gpu` (CUDA semantics and the memory outside torch),
:mod:`.report` (rows, the table, the text), :mod:`.campaign` (a campaign's estimate, errors for users),
:mod:`.strategy` (what a DDP rank holds beyond one GPU; what is not modelled).
"""
