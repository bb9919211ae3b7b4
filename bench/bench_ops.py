"""Benchmark (not a test; CPU only) of what a GPU would have to do (issue 21, item 3): aten ops
and host syncs per steady-state training step, by part, on the code paths CUDA takes.

The step is ``nac.training.loop.fit`` itself (the data loader, the checks, the EMA and the
metrics included), run for 2 and for 3 steps of one epoch from the same model; the difference is
exactly one steady-state step (the set-up, the first step's optimizer state and the epoch end
cancel). Models: the paper profile's Tiny-ImageNet pair (``image.ladder``'s ``perceiver_io`` and
``nac-scale_free``, 64 px) and the ImageNet pre-training pair (``conf/pretrain/imagenet.yaml``,
224 px), as bench/bench_gpu.py builds them, at batch ``--batch`` (ops per step do not depend on
it), with the paper's image training settings (EMA, no clipping) but no augmentation (``--augment``: the
batch's augmentation, the "augment" part), in fp32
(CUDA's bf16 autocast adds casts to both models alike).

CUDA's paths on the CPU: the NAC's ``cpu_shortcuts`` off (``_cuda_paths``), so its kernel sampler
and attention bias take their CUDA form (fixed shapes, "prepared"; "sparse" is CPU only) and the
attention SDPA ("explicit" is CPU only). The regularizer's matching runs on a worker thread
(``Objective.match_async``): its numpy and scipy work is host work off the step's thread, not counted;
what the step's thread does for it (the copy of ``P`` to the host, non-blocking into pinned memory
on CUDA, a clone here) is.

Counting: a ``TorchDispatchMode`` sees every aten op. Parts: forward hooks on the model's children
(tokenizer, generator, read-in, propagators, read-out) and wrappers around the kernel
(``NAC.kernel_probabilities``, ``link_probabilities``, ``KernelSampler``,
``log_normalized_kernel``), the ModFCs' batched code modulation (``NAC.code_modulations``; per
layer, it counts in the layers' parts), the regularizer (``NAC.graph_regularizer``,
``Objective.match_async``), the loss, the optimizer, gradient norm, the loop's checks, the EMA and the
data loader; ops of the backward pass are given to the part whose forward created their autograd
node (by sequence number). Host syncs, as CUDA would have them: data-dependent ops (``nonzero``,
``_local_scalar_dense`` (``.item()``), ``is_nonzero`` (``bool(t)``), ``masked_select``, boolean-mask
indexing, ``unique``, ``equal``, ...), copies to the host (``.to("cpu")``, ``.cpu()``,
``.tolist()``; ``.numpy()`` calls, host-side work, are counted apart) and
blocking copies from the host (a tensor made from Python or numpy data on the device,
a host tensor moved with ``non_blocking=False``): PyTorch synchronises the stream after a blocking host <-> device copy.
Which tensors are host tensors on CUDA is tracked: the loader's batches, tensors made without a
device (``torch.rand(B)``: the CPU generator's draws), copies to the host, and every op's result
whose inputs are all host tensors; ops on them are host work, not syncs.

    python bench/bench_ops.py [--batch 2] [--pairs tiny imagenet mini] [--adamw foreach|fused]
                              [--modulation batched|per_layer] [--augment false|true|authors_tinyimagenet]
                              [--label after]

Writes ``ops.json`` (every label kept: run it before and after a change) and ``ops.md``.
"""

from __future__ import annotations

import argparse
import bisect
import copy
import datetime
import json
import re
import sys
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_paper_cost import pretrain_model  # noqa: E402
from reference_forms import per_layer_modulation  # noqa: E402  (the plain forms live with the tests)

import nac.circuit_graph as circuit_graph  # noqa: E402
import nac.circuits.attention as attention  # noqa: E402
import nac.model as nac_model  # noqa: E402
from nac import build_model  # noqa: E402
from nac.pipeline.params import compose  # noqa: E402
from nac.tracks.image import image_model_config  # noqa: E402
from nac.training import augment, checks, compiled, loop  # noqa: E402
from nac.training import objective as training_objective  # noqa: E402
from nac.training.config import TrainConfig  # noqa: E402

NOTES = """Notes. Ops are aten calls (kernel launches on CUDA, each ~40 us of host time there); the
backward's ops go to the part whose forward made them ("backward (other)": nodes outside the
named parts, e.g. the loss, the DDP wrapper, accumulation). AdamW's foreach form (CUDA's default)
reads each parameter's step count on the host (2 host ops per parameter, no device sync); the
fused one is 8 ops. The NAC's remaining syncs are the regularizer's (P and the target copied to
the host for the matching, the permutation back), issue 21's "matching on a thread" item.
"after_per_layer_modulation": the "after" code before the batched code modulation and the shared
P (``--modulation per_layer``; P then computed by the executor and again by the regularizer);
"after": every ModFC's modulation of a forward computed together ("modulation",
``NAC.code_modulations``; it left the read-in, propagator and read-out parts; no view ops where
the modulation broadcasts as it is) and each propagator's P computed once per step (the "kernel"
part). "after_fused_adamw" predates both.
"after_kernel_regularizer": "after" plus every propagator's P from one cosine distance by one
batched set of ops (``NAC.kernel_probabilities``; the signatures normalised once), P computed in
the training objective and passed to the executor and the regularizer, and the regularizer's
matching on a worker thread while the forward runs (``Objective.match_async``: P copied to pinned host
memory without blocking on CUDA, the target read from a host copy made once, the permutation
copied back non-blocking): no host sync left in the NAC's step. The matching's numpy and scipy
work is off the step's thread and not counted (it still costs host time, in parallel).
"after_batched_kernel": "after_loop_kernel" plus every propagator's kernel drawn by one draw
``[L, B, U, V]`` and every ``log K_hat`` computed by one chain of ops on CUDA's path
(``NAC._layer_samplers``: ``KernelSampler(layers=True)``, ``layer_kernel_biases``; the CPU keeps
its sparse per-layer shortcut), and every layer's regularizer term by one chain
(``layer_losses_from_permutations``; the permutations stacked on the host and copied once): the
kernel part 744 -> 301 ops at the Tiny size (the batched draw's ``stack``/``unbind`` now counted
there, "model (other)" 4 -> 0), the regularizer 152 -> 56. Counted as the labels before it (``--sdpa
cpu``). "after_batched_kernel_fused_sdpa": the same code counted with ``--sdpa fused`` (the default
since): SDPA with a bias, the NAC's attention, counted as the one fused kernel CUDA launches each
way (memory-efficient attention, which takes a bias with a gradient) instead of the ~40 ops of the
CPU's math path; Perceiver IO's SDPA (no bias) was one op each way already.
The NAC/PIO ops goal (<= 1.3) is not reached eagerly: what is left is mostly the ModFCs' own ops
(the modulation's product in every ModFC, forward and backward: propagators, read-in and read-out),
the optimizer's and AccumulateGrad's per-parameter ops (the NAC has more parameter tensors) and the
read-out's kernel. Compiled as one whole step (``train.compile_scope: step``, label
``after_whole_step``, "Compiled step" below) it is: 1.15 at the Tiny size and 1.19 at the ImageNet size.
"""
# the counter since the loop's labels (bench/results/ops_loop.md); appended to NOTES in the .md
NOTES_COUNTING = """
Counting since the labels of bench/results/ops_loop.json ("main_loop_*": main's loop at bbb967b,
"loop_*": the loop of branch h-loop): host tensors are tracked (the CPU generator's draws and what is
computed from them), so a blocking copy of them to the device counts (``augment: true``'s flips on
main); a copy between host and device is one ``_to_copy`` op, as on CUDA (+2 "loop" ops per step:
the inputs and the labels). ``--augment``: the batch augmentation ("augment" part; the recipe's
per-image transforms run in the data pipeline on the host). ``augment: true`` per step: 394 ops at
batch 128 on main (a slice per image), 25 at any batch now (two gathers).
"""

NOTES_COMPILED = """What the compiled column counts (``--compiled``): the step with ``train.compile: default``
(inductor), compiled on the CPU with the code paths CUDA takes, 3 steps from the same model.
"compiled region": the kernels one run of the region launches, read from inductor's output code
of the forward graph and of the backward graph: generated kernels (``cpp_fused_*`` on the CPU;
Triton kernels on CUDA, whose fusion boundaries can differ, so this is an estimate of their
number) plus extern calls (matrix products, convolutions, SDPA, the drop-path draws: the same
library calls on CUDA). "eager outside the region": the eager count's ops of the parts the
compiled step leaves eager (``EAGER_PARTS``: loader, gradient norm, optimizer, checks, EMA, the
loop, "backward (other)" = AccumulateGrad's ``detach`` per parameter, host-only), and for the
NAC the matching in advance (``Objective.matching_in_advance``: ``P`` without gradient, the
permutations' copies). "graphs", "graph breaks", "recompiles": dynamo's counters over the 3
steps (``unique_graphs``, ``graph_break``; recompiles = graphs after step 3 - after step 1).

Scope "step" (``--compile-scope step``, ``train.compile_scope: step``): the region is the whole
step (``nac.training.compiled.whole_step``: forward, loss, gradients by a traced
``torch.autograd.grad``, clipping, torch's functional AdamW on the optimizer's state and the next
step's ``P``), one graph and one output module; eager outside it: loader, checks, EMA, the loop
(``EAGER_PARTS_STEP``), the LRs' fills (2 groups) and the matching started from the ``P`` the last
step returned (one copy of every layer's ``P``, one of the permutations back). Labels from
``after_whole_step`` on count SDPA with a float bias in the region as CUDA's fused kernel, one
extern call each way (``_compiled_fused_sdpa``, the eager column's ``--sdpa fused``
convention): inductor on the CPU decomposes it (matrix products and softmax, forward and
backward: +~60 launches at the ImageNet size, what ``whole_step_cpu_sdpa`` and the
``after_batched_kernel_fused_sdpa`` compiled rows count); Perceiver IO's SDPA has no bias and is
one call either way.
"""

PARTS = (
    "data",
    "augment",
    "tokenizer",
    "generator",
    "modulation",
    "read_in",
    "kernel",
    "propagators",
    "read_out",
    "model (other)",
    "regularizer",
    "loss",
    "backward (other)",
    "grad norm",
    "optimizer",
    "checks",
    "ema",
    "loop",
)
SYNC_OPS = {
    "nonzero",
    "_local_scalar_dense",
    "is_nonzero",
    "masked_select",
    "unique",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "equal",
    "allclose",
    "argwhere",
    "item",
}


class _Tracker:
    """The part stack, the autograd sequence numbers at which parts change (forward) and the
    counts."""

    def __init__(self):
        self.stack: list[str] = []
        self.seq: list[int] = []
        self.seq_part: list[str] = []
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self.sync_kinds: Counter = Counter()
        self.host: Counter = Counter()  # numpy calls on tensors: host-side work in the step
        self.paused = 0  # > 0: ops are not counted (what a fused CUDA kernel does in one launch)

    def part(self) -> str:
        node = torch._C._current_autograd_node()
        if node is not None:  # backward: the part whose forward made this node
            i = bisect.bisect_right(self.seq, node._sequence_nr()) - 1
            return self.seq_part[i] if i >= 0 and self.seq_part[i] != "loop" else "backward (other)"
        return self.stack[-1] if self.stack else "loop"

    def _mark(self):
        self.seq.append(torch._C._autograd._get_sequence_nr())
        self.seq_part.append(self.stack[-1] if self.stack else "loop")

    def push(self, name: str):
        self.stack.append(name)
        self._mark()

    def pop(self):
        self.stack.pop()
        self._mark()

    @contextmanager
    def within(self, name: str):
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def sync(self, kind: str, n: int = 1):
        part = self.part()
        self.syncs[part] += n
        self.sync_kinds[f"{part}: {kind}"] += n


def _is_sync(func, args, kwargs) -> str | None:
    if any(getattr(a, "_bench_host", False) for a in args if isinstance(a, torch.Tensor)):
        return None  # a tensor that lives on the host on CUDA too (the optimizer's step count, say)
    name = func._overloadpacket.__name__
    if name in SYNC_OPS:
        return name
    if (
        name == "repeat_interleave"
        and kwargs.get("output_size") is None
        and len(args)
        and isinstance(args[0], torch.Tensor)
        and (len(args) < 2 or isinstance(args[1], torch.Tensor))
    ):
        return name
    if name in ("index", "index_put", "index_put_", "_index_put_impl_"):
        idx = args[1] if len(args) > 1 else []
        if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in idx or []):
            return f"{name} (boolean mask)"
    return None


class _OpCounter(TorchDispatchMode):
    def __init__(self, tracker: _Tracker):
        super().__init__()
        self.t = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.t.paused:
            return func(*args, **kwargs)
        self.t.ops[self.t.part()] += 1
        kind = _is_sync(func, args, kwargs)
        if kind and self.t.part() != "data":  # the data loader works on the host
            self.t.sync(kind)
        out = func(*args, **kwargs)
        # where the result lives on CUDA: on the host when every tensor it is made from is there
        # (a random draw of the CPU generator and what is computed from it, say), so that its
        # later blocking ``.to(device)`` counts as the sync it is there
        ins = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if ins and all(getattr(a, "_bench_host", False) for a in ins):
            for o in pytree.tree_leaves(out):
                if isinstance(o, torch.Tensor):
                    _mark_host(o)
        return out


def _mark_host(x: torch.Tensor) -> torch.Tensor:
    try:
        x._bench_host = True
    except (AttributeError, RuntimeError):
        pass
    return x


def _wrap(owner, name: str, part: str, t: _Tracker, stack: ExitStack):
    orig = getattr(owner, name)

    def wrapped(*a, **k):
        with t.within(part):
            return orig(*a, **k)

    setattr(owner, name, wrapped)
    stack.callback(setattr, owner, name, orig)


def _host_patches(t: _Tracker, stack: ExitStack) -> None:
    """Python-side transfers: what crosses between host and device on CUDA."""
    T = torch.Tensor

    def is_cpu_target(a, k):
        d = k.get("device", a[0] if a else None)
        return (isinstance(d, str) and d == "cpu") or (
            isinstance(d, torch.device) and d.type == "cpu" and getattr(d, "_bench_literal", False)
        )

    orig_to, orig_cpu, orig_numpy, orig_tolist = T.to, T.cpu, T.numpy, T.tolist

    def to(self, *a, **k):
        d = k.get("device", a[0] if a and not isinstance(a[0], torch.dtype) else None)
        host = getattr(self, "_bench_host", False)
        to_host = isinstance(d, str) and d == "cpu"
        to_device = d is not None and not isinstance(d, torch.Tensor) and not to_host
        if to_host and not host:
            t.sync("copy to host (.to('cpu'))")
        elif to_device and host and not k.get("non_blocking", False):
            t.sync("blocking copy from host (.to(device))")
        out = orig_to(self, *a, **k)
        if out is self and (to_host and not host or to_device and host):
            # a copy between host and device on CUDA (one ``_to_copy`` op there): a new tensor
            # here too, so the host's marks do not follow the data to the device or back
            out = orig_to(self, *a, **{**k, "copy": True})
        if to_host:
            _mark_host(out)
        return out

    def cpu(self, *a, **k):
        if getattr(self, "_bench_host", False):
            return orig_cpu(self, *a, **k)
        t.sync("copy to host (.cpu())")
        return _mark_host(orig_to(self, "cpu", copy=True))

    def numpy(self, *a, **k):
        t.host[t.part()] += 1
        return orig_numpy(self, *a, **k)

    def tolist(self, *a, **k):
        if not getattr(self, "_bench_host", False):
            t.sync("tolist")
        return orig_tolist(self, *a, **k)

    for name, fn in (("to", to), ("cpu", cpu), ("numpy", numpy), ("tolist", tolist)):
        setattr(T, name, fn)
        stack.callback(
            setattr, T, name, {"to": orig_to, "cpu": orig_cpu, "numpy": orig_numpy, "tolist": orig_tolist}[name]
        )

    for name in ("rand", "randn", "randint", "randperm", "arange", "zeros", "ones", "full", "empty", "linspace"):
        orig = getattr(torch, name)

        def factory(*a, _orig=orig, **k):  # no device: the host on CUDA too (the CPU generator's draws)
            out = _orig(*a, **k)
            d = k.get("device")
            return _mark_host(out) if d is None or (isinstance(d, str) and d == "cpu") else out

        setattr(torch, name, factory)
        stack.callback(setattr, torch, name, orig)

    for name in ("tensor", "as_tensor", "from_numpy"):
        orig = getattr(torch, name)

        def make(*a, _orig=orig, _name=name, **k):
            src = a[0] if a else k.get("data")
            out = _orig(*a, **k)
            if isinstance(src, torch.Tensor):
                return out
            dev = k.get("device")
            # Python / numpy data put on the model's device (a torch.device: on CUDA the GPU) is a
            # blocking copy; the literal "cpu" is the host on CUDA too
            if dev is not None and not (isinstance(dev, str) and dev == "cpu"):
                t.sync(f"blocking copy from host (torch.{_name}(..., device=))")
            else:
                try:
                    out._bench_host = True
                except (AttributeError, RuntimeError):
                    pass
            return out

        setattr(torch, name, make)
        stack.callback(setattr, torch, name, orig)


def _fused_sdpa(t: _Tracker, stack: ExitStack) -> None:
    """SDPA with a bias (``attn_mask``) counted as CUDA runs it: one fused kernel forward
    (``_scaled_dot_product_efficient_attention``, which takes a bias with a gradient) and one
    backward (its ``_backward``, the bias's gradient included). The CPU has no fused kernel for
    such a bias and decomposes it into its math path (~40 ops forward and backward, what the
    labels before ``after_batched_kernel`` counted for the NAC's attention); SDPA without a bias
    is one op each way on both (flash attention). The values are the CPU's SDPA's."""
    sdpa = F.scaled_dot_product_attention

    class FusedSDPA(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, bias, scale):
            t.ops[t.part()] += 1
            t.paused += 1
            try:
                out = sdpa(q, k, v, attn_mask=bias, scale=scale)
            finally:
                t.paused -= 1
            ctx.save_for_backward(q, k, v, bias)
            ctx.scale = scale
            return out

        @staticmethod
        def backward(ctx, grad):
            t.ops[t.part()] += 1
            t.paused += 1
            try:
                with torch.enable_grad():
                    ins = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
                    out = sdpa(*ins[:3], attn_mask=ins[3], scale=ctx.scale)
                    need = [x for x in ins if x.requires_grad]
                    got = iter(torch.autograd.grad(out, need, grad))
                return (*(next(got) if x.requires_grad else None for x in ins), None)
            finally:
                t.paused -= 1

    def counted(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if attn_mask is None or dropout_p or is_causal or kw or attn_mask.dtype == torch.bool:
            return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        return FusedSDPA.apply(q, k, v, attn_mask, scale)

    F.scaled_dot_product_attention = counted
    stack.callback(setattr, F, "scaled_dot_product_attention", sdpa)


_SDPA = F.scaled_dot_product_attention


@torch.library.custom_op("nac_bench::sdpa_bias", mutates_args=())
def _sdpa_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """SDPA with a bias as one opaque op: what the compiled column counts as CUDA's one
    ``_scaled_dot_product_efficient_attention`` (``_compiled_fused_sdpa``)."""
    return _SDPA(q, k, v, attn_mask=bias, scale=scale).contiguous()


@_sdpa_bias.register_fake
def _(q, k, v, bias, scale):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@torch.library.custom_op("nac_bench::sdpa_bias_backward", mutates_args=())
def _sdpa_bias_backward(
    grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Its backward as one opaque op (CUDA's ``_scaled_dot_product_efficient_attention_backward``,
    the bias's gradient included)."""
    p = torch.softmax(q @ k.transpose(-2, -1) * scale + bias, dim=-1)  # (autograd is off inside an op)
    dp = grad @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ grad, ds


@_sdpa_bias_backward.register_fake
def _(grad, q, k, v, bias, scale):
    return tuple(x.new_empty(x.shape) for x in (q, k, v, bias))


def _sdpa_bias_setup(ctx, inputs, output):
    q, k, v, bias, scale = inputs
    ctx.save_for_backward(q, k, v, bias)
    ctx.scale = scale


def _sdpa_bias_grad(ctx, grad):
    return (*_sdpa_bias_backward(grad, *ctx.saved_tensors, ctx.scale), None)


_sdpa_bias.register_autograd(_sdpa_bias_grad, setup_context=_sdpa_bias_setup)


def _compiled_fused_sdpa(stack: ExitStack) -> None:
    """``_fused_sdpa``'s convention for the compiled column: SDPA with a float bias traced as one
    opaque op each way (an extern call in inductor's output code, as CUDA's fused kernel with a
    bias is), instead of the CPU's decomposition (matrix products, softmax and their backward:
    inductor on the CPU has no fused attention with a bias that has a gradient)."""

    def counted(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if attn_mask is None or dropout_p or is_causal or kw or attn_mask.dtype == torch.bool:
            return _SDPA(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        scale = scale if scale is not None else q.shape[-1] ** -0.5
        return _sdpa_bias(q, k, v, attn_mask.expand(*q.shape[:-1], k.shape[-2]), scale)

    F.scaled_dot_product_attention = counted
    stack.callback(setattr, F, "scaled_dot_product_attention", _SDPA)


def _instrument(model: nn.Module, t: _Tracker, stack: ExitStack) -> None:
    def hooks(module, part):
        h1 = module.register_forward_pre_hook(lambda *_: t.push(part))
        h2 = module.register_forward_hook(lambda *_: t.pop())
        stack.callback(h1.remove)
        stack.callback(h2.remove)

    hooks(model, "model (other)")
    for name in ("tokenizer", "generator", "read_in", "read_out"):
        if hasattr(model, name):
            hooks(getattr(model, name), name)
    for layer in getattr(model, "propagators", []):
        hooks(layer, "propagators")
    for owner, name, part in (
        (circuit_graph, "link_probabilities", "kernel"),
        (nac_model.NAC, "kernel_probabilities", "kernel"),
        (circuit_graph.KernelSampler, "__init__", "kernel"),
        (circuit_graph.KernelSampler, "__call__", "kernel"),
        (circuit_graph, "layer_kernel_biases", "kernel"),
        (nac_model.NAC, "_samplers", "kernel"),
        (attention, "log_normalized_kernel", "kernel"),
        (nac_model.NAC, "graph_regularizer", "regularizer"),
        (training_objective.Objective, "regularizer", "regularizer"),
        (training_objective.Objective, "match_async", "regularizer"),
        (nac_model.NAC, "code_modulations", "modulation"),
        (loop.F, "cross_entropy", "loss"),
        (compiled, "soft_cross_entropy", "loss"),
        (torch.optim.AdamW, "step", "optimizer"),
        (torch.optim.Optimizer, "zero_grad", "optimizer"),
        (nn.utils, "get_total_norm", "grad norm"),
        (nn.utils, "clip_grad_norm_", "grad norm"),
        (torch.optim.swa_utils.AveragedModel, "update_parameters", "ema"),
        (torch.utils.data.dataloader._BaseDataLoaderIter, "__next__", "data"),
        (loop, "augment_images", "augment"),
        (augment.BatchMixer, "__call__", "augment"),
    ):
        _wrap(owner, name, part, t, stack)
    _wrap(checks.StepChecks, "record", "checks", t, stack)
    _wrap(loop, "ema_update", "ema", t, stack)


class _Images(torch.utils.data.Dataset):
    def __init__(self, n: int, size: int, classes: int):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": int(self.y[i])}


def _mark_host_batches(stack: ExitStack) -> None:
    """The loader's batches are host tensors (what ``.to(device)`` copies on CUDA)."""
    it = torch.utils.data.dataloader._BaseDataLoaderIter
    orig = it.__next__

    def nxt(self):
        batch = orig(self)
        for v in batch.values():
            if isinstance(v, torch.Tensor):
                v._bench_host = True
        return batch

    it.__next__ = nxt
    stack.callback(setattr, it, "__next__", orig)


def _cuda_paths(model: nn.Module) -> nn.Module:
    """``model`` (a copy the bench owns) on the code paths CUDA takes: a NAC's CPU shortcuts off
    (``NAC.set_cpu_shortcuts``); the baselines have none. Returns it."""
    if isinstance(model, nac_model.NAC):
        model.set_cpu_shortcuts(False)
    return model


def count_fit(
    model: nn.Module,
    steps: int,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    adamw: str = "foreach",
    modulation: str = "batched",
    augment: bool | str = False,
    sdpa: str = "fused",
) -> _Tracker:
    model = _cuda_paths(copy.deepcopy(model))  # CUDA's sampler, bias and attention (the CPU's shortcuts off)
    if modulation == "per_layer":  # NAC.code_modulations' reference form
        per_layer_modulation(model)
    t = _Tracker()
    train = TrainConfig.from_dict(
        {
            **cfg,
            "epochs": 1,
            "batch_size": batch,
            "augment": augment,
            "num_workers": 0,
            "device": "cpu",
            "warmup_epochs": 0,
            "amp": False,
            "adamw": adamw,  # CUDA's default AdamW is the foreach one
        }
    )
    with ExitStack() as stack:
        _mark_host_batches(stack)
        _instrument(model, t, stack)
        if sdpa == "fused":
            _fused_sdpa(t, stack)
        _host_patches(t, stack)
        stack.enter_context(_OpCounter(t))
        loop.fit(model, _Images(steps * batch, size, classes), None, train, progress=False)
    return t


def measure(
    model: nn.Module,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    adamw: str = "foreach",
    modulation: str = "batched",
    augment: bool | str = False,
    sdpa: str = "fused",
) -> dict:
    a = count_fit(model, 2, batch, size, classes, cfg, adamw, modulation, augment, sdpa)
    b = count_fit(model, 3, batch, size, classes, cfg, adamw, modulation, augment, sdpa)
    ops = {p: b.ops[p] - a.ops[p] for p in PARTS if b.ops[p] - a.ops[p]}
    syncs = {p: b.syncs[p] - a.syncs[p] for p in PARTS if b.syncs[p] - a.syncs[p]}
    kinds = {k: b.sync_kinds[k] - a.sync_kinds[k] for k in sorted(b.sync_kinds) if b.sync_kinds[k] - a.sync_kinds[k]}
    host = {p: b.host[p] - a.host[p] for p in PARTS if b.host[p] - a.host[p]}
    return {
        "ops": ops,
        "ops_total": sum(ops.values()),
        "syncs": syncs,
        "syncs_total": sum(syncs.values()),
        "sync_kinds": kinds,
        "numpy_calls": host,
    }


# the parts a compiled step (``train.compile``) leaves eager: the loader, the batch augmentation,
# the gradient norm, the optimizer, the checks, the EMA, the loop's own ops and "backward (other)"
# (one ``detach`` per parameter in AccumulateGrad, which runs after the compiled backward)
EAGER_PARTS = ("data", "augment", "grad norm", "optimizer", "checks", "ema", "loop", "backward (other)")
# what ``train.compile_scope: step`` leaves eager: the gradients, their norm and AdamW are in its graph
EAGER_PARTS_STEP = ("data", "augment", "checks", "ema", "loop")


def _calls(code: str) -> tuple[int, int]:
    """``(generated kernels, extern calls)`` launched by one run of an inductor output module: the
    ``cpp_fused_*`` calls (each a Triton kernel on CUDA) and the ``extern_kernels.*`` /
    ``torch.ops.*`` calls (matrix products, convolutions, SDPA, random draws) in its ``call``."""
    body = code[code.index("def call(") :]
    body = body[: body.index("\n\n\n")] if "\n\n\n" in body else body
    kernels = re.findall(r"^\s+(?:cpp|triton)_\w+\(", body, re.M) + re.findall(r"^\s+\w+\.run\(", body, re.M)
    extern = re.findall(r"^\s+.*?(?:extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(", body, re.M)
    return len(kernels), len(extern)


def compiled_counts(
    model: nn.Module,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    eager: dict,
    mode="default",
    scope="forward",
    sdpa="fused",
):
    """The compiled column: what one steady-state step with ``train.compile: mode`` launches.
    ``scope="step"`` (``train.compile_scope: step``): the region is ``compiled.whole_step``
    (forward, gradients, clipping, AdamW and the next step's ``P``: one graph, one output
    module), the eager parts ``EAGER_PARTS_STEP`` plus the LRs' fills (``step_lrs``) and the
    matching started from the ``P`` the step returned, counted with the matching.
    The region (``nac.training.compiled.objective_losses``: forward, loss, regularizer at the
    permutations matched in advance, and its backward) compiled by inductor on the CPU, 3 steps;
    its kernels counted from the forward's and the backward's output code (``_calls``); plus
    the eager ops of the parts the compiled step leaves eager (``EAGER_PARTS``, from the eager
    count ``eager``) and of the matching in advance (``start_matching``/``finish_matching``,
    counted here); graphs and graph breaks from dynamo's counters."""
    import torch._dynamo as dynamo
    import torch._inductor.config as icfg
    import torch._inductor.graph as igraph
    from torch._dynamo.utils import counters

    from nac.training.objective import Objective
    from nac.training.optim import decay_groups, make_adamw

    model = _cuda_paths(copy.deepcopy(model)).train()
    objective = Objective(model)
    codes: list[str] = []
    orig = igraph.GraphLowering.compile_to_module

    def capture(self, *a, **k):
        mod = orig(self, *a, **k)
        codes.append(Path(mod.__file__).read_text())
        return mod

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    graphs = []
    with ExitStack() as stack:
        stack.callback(setattr, igraph.GraphLowering, "compile_to_module", orig)
        igraph.GraphLowering.compile_to_module = capture
        stack.enter_context(icfg.patch(fx_graph_cache=False))
        if sdpa == "fused":
            _compiled_fused_sdpa(stack)
        dynamo.reset()
        counters.clear()
        losses = compiled.compile_losses(mode)
        if scope == "step":
            step = compiled.compile_step(mode)
            decay, no_decay = decay_groups(model, cfg.get("decay_filter", "authors"))
            wd, lr = cfg.get("weight_decay", 0.05), cfg.get("lr", 1e-3)
            param_groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
            optimizer = make_adamw(param_groups, lr=lr)
            groups, lrs = compiled.adamw_groups(optimizer), None
        ahead = None  # scope step: the next matching, started from the P the last step returned
        for _ in range(3):
            t = _Tracker()
            with _OpCounter(t):
                perms = compiled.finish_matching(ahead or compiled.start_matching(objective), x.device)
                if scope == "step":
                    lrs = compiled.step_lrs(optimizer, lrs, x.device)
            args = (objective, {"inputs": x}, y, None, perms, cfg.get("label_smoothing", 0.1))
            if scope == "step":
                clip = cfg.get("grad_clip", 1.0)
                next_P = step(args[0], groups, lrs, *args[1:], cfg.get("reg_weight", 0.1), False, clip)[-1]
                with _OpCounter(t):
                    ahead = compiled.start_matching(objective, next_P) if next_P is not None else None
            else:
                loss = losses(*args, cfg.get("reg_weight", 0.1), False)[-1]
                loss.backward()
                model.zero_grad(set_to_none=True)
            graphs.append(counters["stats"]["unique_graphs"])
        breaks = sum(counters["graph_break"].values())
        dynamo.reset()
    matching = sum(t.ops.values())
    if scope == "step":
        if len(codes) != 1:
            raise RuntimeError(f"expected one graph for the whole step, inductor compiled {len(codes)}")
        (fk, fx), (bk, bx) = _calls(codes[0]), (0, 0)
        region = {"step kernels": fk, "step extern": fx}
        outside = {p: n for p, n in eager["ops"].items() if p in EAGER_PARTS_STEP}
        extra = {"matching and LRs (eager)": matching} if matching else {}
    else:
        if len(codes) != 2:
            raise RuntimeError(f"expected a forward and a backward graph, inductor compiled {len(codes)}")
        (fk, fx), (bk, bx) = _calls(codes[0]), _calls(codes[1])
        region = {"forward kernels": fk, "forward extern": fx, "backward kernels": bk, "backward extern": bx}
        outside = {p: n for p, n in eager["ops"].items() if p in EAGER_PARTS}
        extra = {"matching (eager)": matching} if matching else {}
    return {
        "mode": mode,
        "scope": scope,
        "region": region,
        "eager": {**outside, **extra},
        "launches_total": fk + fx + bk + bx + sum(outside.values()) + matching,
        "graphs": graphs[-1],
        "recompiles": graphs[-1] - graphs[0],
        "graph_breaks": breaks,
    }


def pairs(names) -> dict:
    params = compose(["profile=paper"])
    train = {k: v for k, v in params["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
    out = {}
    if "tiny" in names:
        size = params["image"]["model"]["tokenizer"]["image_size"]
        models = {}
        for run in ("perceiver_io", "nac-scale_free"):
            torch.manual_seed(0)
            models[run] = build_model(image_model_config(params, run, seed=0, num_classes=200))
        out["tiny"] = (models, size, 200, train)
    if "imagenet" in names:
        pre = params["fewshot"]["pretrain"]
        size = pre["model"]["tokenizer"]["image_size"]
        models = {}
        for name in ("perceiver_io", "nac"):
            torch.manual_seed(0)
            models[name] = pretrain_model(params, name, fit_signatures=False)
        out["imagenet"] = (models, size, models["nac"].config.num_classes, train)
    if "mini" in names:  # the mini (and converged) profile's image models: the converged run's step costs
        mp = compose(["profile=mini"])
        mtrain = {k: v for k, v in mp["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
        models = {}
        for run in ("perceiver_io", "modfc", "frozen_graph", "nac-scale_free", "neural_interpreter"):
            torch.manual_seed(0)
            models[run] = build_model(image_model_config(mp, run, seed=0, num_classes=10))
        out["mini"] = (models, mp["image"]["model"]["tokenizer"]["image_size"], 10, mtrain)
    return out


def table(results: dict) -> str:
    lines = [
        "| label | pair | model | ops/step | host syncs/step | NAC/PIO ops | ops by part | syncs by part |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, res in results.items():
        if label == "machine":
            continue
        for pair, models in res.items():
            pio = next(v for k, v in models.items() if k.startswith("perceiver"))
            for name, r in models.items():
                ratio = f"{r['ops_total'] / pio['ops_total']:.2f}" if r is not pio else ""
                lines.append(
                    f"| {label} | {pair} | {name} | {r['ops_total']} | {r['syncs_total']} | {ratio} | "
                    + ", ".join(f"{p} {n}" for p, n in r["ops"].items())
                    + " | "
                    + ", ".join(f"{k} {n}" for k, n in r["sync_kinds"].items())
                    + " |"
                )
    return "\n".join(lines)


def compiled_table(results: dict) -> str:
    """The compiled column of every label that has one."""
    lines = [
        "| label | pair | model | scope | eager ops/step | compiled launches/step | NAC/PIO (compiled) | compiled "
        "region: forward kernels + extern, backward kernels + extern (scope step: the one graph's) | eager outside "
        "the region | graphs | graph breaks | recompiles |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, res in results.items():
        if label == "machine":
            continue
        for pair, models in res.items():
            pio = next((v for k, v in models.items() if k.startswith("perceiver")), None)
            for name, r in models.items():
                c = r.get("compiled")
                if c is None:
                    continue
                pc = (pio or {}).get("compiled")
                ratio = f"{c['launches_total'] / pc['launches_total']:.2f}" if pc and r is not pio else ""
                g = c["region"]
                region = (
                    f"{g['step kernels']} + {g['step extern']}"
                    if "step kernels" in g
                    else f"{g['forward kernels']} + {g['forward extern']}, "
                    f"{g['backward kernels']} + {g['backward extern']}"
                )
                lines.append(
                    f"| {label} | {pair} | {name} | {c.get('scope', 'forward')} | {r['ops_total']} | "
                    f"{c['launches_total']} | {ratio} | {region} | "
                    + ", ".join(f"{p} {n}" for p, n in c["eager"].items())
                    + f" | {c['graphs']} | {c['graph_breaks']} | {c['recompiles']} |"
                )
    return "\n".join(lines) if len(lines) > 2 else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--pairs", nargs="+", default=["tiny", "imagenet"], choices=["tiny", "imagenet", "mini"])
    ap.add_argument("--label", default="after", help="the key the results are kept under (before / after)")
    ap.add_argument(
        "--adamw",
        choices=["foreach", "fused"],
        default="foreach",
        help="AdamW's form (foreach: PyTorch's default on CUDA; fused: train.adamw=fused)",
    )
    ap.add_argument(
        "--modulation",
        choices=["batched", "per_layer"],
        default="batched",
        help="the ModFCs' code modulation (per_layer: the form before issue 21, tests/reference_forms.py)",
    )
    ap.add_argument(
        "--augment",
        choices=["false", "true", "authors_tinyimagenet"],
        default="false",
        help="train.augment in the counted step (the data pipeline's transforms run on the host)",
    )
    ap.add_argument(
        "--sdpa",
        choices=["fused", "cpu"],
        default="fused",
        help="SDPA with a bias counted as CUDA's fused kernel (1 op each way) or as the CPU's math path runs it",
    )
    ap.add_argument(
        "--compiled",
        nargs="*",
        default=[],
        choices=["tiny", "imagenet", "mini"],
        help="the pairs that also get the compiled column (train.compile: default, inductor on the CPU)",
    )
    ap.add_argument(
        "--compile-scope",
        choices=["forward", "step"],
        default="forward",
        help="the compiled column's train.compile_scope (step: the whole step, AdamW included, one graph)",
    )
    ap.add_argument("--out", default="bench/results/ops.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    res = {}
    for pair, (models, size, classes, train) in pairs(a.pairs).items():
        res[pair] = {}
        for name, model in models.items():
            augment = {"false": False, "true": True}.get(a.augment, a.augment)
            res[pair][name] = measure(model, a.batch, size, classes, train, a.adamw, a.modulation, augment, a.sdpa)
            print(pair, name, res[pair][name]["ops_total"], "ops", res[pair][name]["syncs_total"], "syncs", flush=True)
            if pair in a.compiled:
                res[pair][name]["compiled"] = compiled_counts(
                    model, a.batch, size, classes, train, res[pair][name], scope=a.compile_scope, sdpa=a.sdpa
                )
                print(pair, name, "compiled", res[pair][name]["compiled"], flush=True)
    results[a.label] = {**results.get(a.label, {}), **res}
    results.setdefault("machine", {})[a.label] = {
        "torch": torch.__version__,
        "batch": a.batch,
        "adamw": a.adamw,
        "modulation": a.modulation,
        "augment": a.augment,
        "sdpa": a.sdpa,
        "compiled": a.compiled,
        "compile_scope": a.compile_scope,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(render(results))
    print(table(results))


def render(results: dict) -> str:
    """``ops.md``: the eager table, its notes, and the compiled table where a label has one."""
    return (
        "# Aten ops and host syncs per steady-state training step (bench/bench_ops.py)\n\n"
        "CUDA's code paths taken on the CPU, fp32, paper-profile sizes (the `mini` pair: mini's image models); "
        "one step = fit(3 steps) - fit(2 steps).\n\n"
        + table(results)
        + "\n\n"
        + NOTES
        + NOTES_COUNTING
        + (
            "\n## Compiled step (train.compile: default)\n\n" + compiled_table(results) + "\n\n" + NOTES_COMPILED
            if compiled_table(results)
            else ""
        )
    )


if __name__ == "__main__":
    main()
