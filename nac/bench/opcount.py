"""Counting what a training step asks of a GPU, on the CPU (issue 21, item 3; the ``costs`` stage
and ``bench/bench_ops.py``): aten ops and host syncs per part of one ``nac.training.loop.fit``
step, on the code paths CUDA takes.

Counting: a ``TorchDispatchMode`` (``OpCounter``) sees every aten op. Parts: forward hooks on the
model's children (tokenizer, generator, read-in, propagators, read-out) and wrappers around the
kernel (``NAC.graph.kernel_probabilities``, ``link_probabilities``, ``KernelSampler``,
``layer_kernel_biases``, ``log_normalized_kernel``, ``Kernel.log_normalized``), the ModFCs' batched
code modulation (``NAC.code_modulations``), the regularizer (``NAC.graph.regularizer``,
``Objective.regularizer``, ``Objective.match_async``), the loss, the optimizer, gradient norm, the
loop's checks, the EMA and the data loader (``instrument``); ops of the backward pass are given to
the part whose forward created their autograd node (by sequence number). Host syncs, as CUDA would
have them: data-dependent ops (``nonzero``, ``_local_scalar_dense`` (``.item()``), ``is_nonzero`` (``bool(t)``),
``masked_select``, boolean-mask indexing, ``unique``, ``equal``, ...), copies to the host
(``.to("cpu")``, ``.cpu()``, ``.tolist()``; ``.numpy()`` calls, host-side work, are counted
apart) and blocking copies from the host (a tensor made from Python or numpy data on the device,
a host tensor moved with ``non_blocking=False``). Which tensors are host tensors on CUDA is
tracked: the loader's batches, tensors made without a device (``torch.rand(B)``: the CPU
generator's draws), copies to the host, and every op's result whose inputs are all host tensors;
ops on them are host work, not syncs.

Why the copies are patched (``host_patches``) and not seen by the dispatch mode: on the CPU a
copy "to the host" is no copy at all (``x.to("cpu")`` returns ``x``, ``.tolist()`` and
``.numpy()`` read the storage), so it never reaches the dispatcher, and torch's profiler records
no op for it either; only the Python call says a copy to the host would happen on CUDA. The
patches are undone on exit (an ``ExitStack``); nothing outside a count sees them.

The counting and ``nac.bench.step_ops`` (the step counted) are measurement code: the training
code never imports them.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from contextlib import ExitStack, contextmanager

import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import nac.circuit_graph as circuit_graph
import nac.circuits.kernel as circuit_kernel
import nac.model as nac_model
from nac.training import augment, checks, loop
from nac.training import objective as training_objective

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


class Tracker:
    """The part stack, the autograd sequence numbers at which parts change (forward) and the
    counts, of the thread that made it (the step's): host work on other threads (the matching's
    worker) is off the step's thread and not counted."""

    def __init__(self):
        self.thread = threading.get_ident()
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

    def on_step_thread(self) -> bool:
        return threading.get_ident() == self.thread

    def sync(self, kind: str, n: int = 1):
        if not self.on_step_thread():
            return
        part = self.part()
        self.syncs[part] += n
        self.sync_kinds[f"{part}: {kind}"] += n


def is_sync(func, args, kwargs) -> str | None:
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


class OpCounter(TorchDispatchMode):
    def __init__(self, tracker: Tracker):
        super().__init__()
        self.t = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.t.paused:
            return func(*args, **kwargs)
        self.t.ops[self.t.part()] += 1
        kind = is_sync(func, args, kwargs)
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
                    mark_host(o)
        return out


def mark_host(x: torch.Tensor) -> torch.Tensor:
    try:
        x._bench_host = True
    except (AttributeError, RuntimeError):
        pass
    return x


def _wrap(owner, name: str, part: str, t: Tracker, stack: ExitStack):
    orig = getattr(owner, name)

    def wrapped(*a, **k):
        with t.within(part):
            return orig(*a, **k)

    setattr(owner, name, wrapped)
    stack.callback(setattr, owner, name, orig)


def host_patches(t: Tracker, stack: ExitStack) -> None:
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
            mark_host(out)
        return out

    def cpu(self, *a, **k):
        if getattr(self, "_bench_host", False):
            return orig_cpu(self, *a, **k)
        t.sync("copy to host (.cpu())")
        return mark_host(orig_to(self, "cpu", copy=True))

    def numpy(self, *a, **k):
        if t.on_step_thread():
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
            return mark_host(out) if d is None or (isinstance(d, str) and d == "cpu") else out

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


def instrument(model: nn.Module, t: Tracker, stack: ExitStack) -> None:
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
        (circuit_graph.CircuitGraph, "kernel_probabilities", "kernel"),
        (circuit_graph.KernelSampler, "__init__", "kernel"),
        (circuit_graph.KernelSampler, "__call__", "kernel"),
        (circuit_graph, "layer_kernel_biases", "kernel"),
        (circuit_graph.CircuitGraph, "kernel_samplers", "kernel"),
        (circuit_kernel, "log_normalized_kernel", "kernel"),
        (circuit_kernel.Kernel, "log_normalized", "kernel"),
        (circuit_graph.CircuitGraph, "regularizer", "regularizer"),
        (training_objective.Objective, "regularizer", "regularizer"),
        (training_objective.Objective, "match_async", "regularizer"),
        (nac_model.NAC, "code_modulations", "modulation"),
        (loop.F, "cross_entropy", "loss"),
        (training_objective, "soft_cross_entropy", "loss"),
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


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int, size: int, classes: int):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": int(self.y[i])}


def mark_host_batches(stack: ExitStack) -> None:
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


def cuda_paths(model: nn.Module) -> nn.Module:
    """``model`` (a copy the bench owns) on the code paths CUDA takes: a NAC's CPU shortcuts off
    (``NAC.set_cpu_shortcuts``); the baselines have none. Returns it."""
    if isinstance(model, nac_model.NAC):
        model.set_cpu_shortcuts(False)
    return model


__all__ = [
    "PARTS",
    "OpCounter",
    "Tracker",
    "cuda_paths",
    "host_patches",
    "instrument",
    "mark_host_batches",
]
