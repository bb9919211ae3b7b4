"""Benchmark (not a test; CPU only) of what a GPU would have to do (issue 21, item 3): aten ops
and host syncs per steady-state training step, by part, on the code paths CUDA takes.

The step is ``nac.training.loop.fit`` itself (the data loader, the checks, the EMA and the
metrics included), run for 2 and for 3 steps of one epoch from the same model; the difference is
exactly one steady-state step (the set-up, the first step's optimizer state and the epoch end
cancel). Models: the paper profile's Tiny-ImageNet pair (``image.ladder``'s ``perceiver_io`` and
``nac-scale_free``, 64 px) and the ImageNet pre-training pair (``conf/pretrain/imagenet.yaml``,
224 px), as bench/bench_gpu.py builds them, at batch ``--batch`` (ops per step do not depend on
it), with the paper's image training settings (EMA, no clipping) but no augmentation, in fp32
(CUDA's bf16 autocast adds casts to both models alike).

CUDA's paths on the CPU: the NAC's kernel sampler in its CUDA form (``sampler_impl`` "prepared":
``NAC._sampler`` takes "sparse" on CPU only) and SDPA for the attention (``SKMDPA.attn_impl``;
"explicit" is CPU only).

Counting: a ``TorchDispatchMode`` sees every aten op. Parts: forward hooks on the model's
children (tokenizer, generator, read-in, propagators, read-out) and wrappers around the kernel
(``link_probabilities``, ``KernelSampler``, ``log_normalized_kernel``), the ModFCs' batched code
modulation (``NAC.code_modulations``; per layer, it counts in the layers' parts), the regularizer
(``NAC.graph_regularizer``), the loss, the optimizer, gradient norm, the loop's checks, the EMA
and the data loader; ops of the backward pass are given to the part whose forward created their
autograd node (by sequence number). Host syncs, as CUDA would have them: data-dependent ops
(``nonzero``, ``_local_scalar_dense`` (``.item()``), ``is_nonzero`` (``bool(t)``),
``masked_select``, boolean-mask indexing, ``unique``, ``equal``, ...), copies to the host
(``.to("cpu")``, ``.cpu()``, ``.tolist()``; ``.numpy()`` calls, host-side work, are counted
apart) and blocking copies from the host (a tensor made from Python or numpy data on the device,
a host tensor moved with ``non_blocking=False``): PyTorch synchronises the stream after a blocking host <-> device copy.

    python bench/bench_ops.py [--batch 2] [--pairs tiny imagenet mini] [--adamw foreach|fused]
                              [--modulation batched|per_layer] [--label after]

Writes ``ops.json`` (every label kept: run it before and after a change) and ``ops.md``.
"""

from __future__ import annotations

import argparse
import bisect
import copy
import datetime
import json
import sys
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_paper_cost import pretrain_model  # noqa: E402

import nac.circuits.attention as attention  # noqa: E402
import nac.model as nac_model  # noqa: E402
from nac import build_model  # noqa: E402
from nac.pipeline.params import compose  # noqa: E402
from nac.tracks.image import image_model_config  # noqa: E402
from nac.training import checks, loop  # noqa: E402
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
The NAC/PIO ops goal (<= 1.3) is not reached: the kernel part (sampling, log K_hat) is next.
"""

PARTS = (
    "data",
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
        self.t.ops[self.t.part()] += 1
        kind = _is_sync(func, args, kwargs)
        if kind and self.t.part() != "data":  # the data loader works on the host
            self.t.sync(kind)
        return func(*args, **kwargs)


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
        if isinstance(d, str) and d == "cpu" and not getattr(self, "_bench_host", False):
            t.sync("copy to host (.to('cpu'))")
        elif (
            d is not None
            and not isinstance(d, torch.Tensor)
            and getattr(self, "_bench_host", False)
            and not (isinstance(d, str) and d == "cpu")
        ):
            if not k.get("non_blocking", False):
                t.sync("blocking copy from host (.to(device))")
        out = orig_to(self, *a, **k)
        return out

    def cpu(self, *a, **k):
        if not getattr(self, "_bench_host", False):
            t.sync("copy to host (.cpu())")
        return orig_cpu(self, *a, **k)

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
        (nac_model, "link_probabilities", "kernel"),
        (nac_model.KernelSampler, "__init__", "kernel"),
        (nac_model.KernelSampler, "__call__", "kernel"),
        (attention, "log_normalized_kernel", "kernel"),
        (nac_model.NAC, "graph_regularizer", "regularizer"),
        (nac_model.NAC, "code_modulations", "modulation"),
        (loop.F, "cross_entropy", "loss"),
        (loop, "soft_cross_entropy", "loss"),
        (torch.optim.AdamW, "step", "optimizer"),
        (torch.optim.Optimizer, "zero_grad", "optimizer"),
        (nn.utils, "get_total_norm", "grad norm"),
        (nn.utils, "clip_grad_norm_", "grad norm"),
        (torch.optim.swa_utils.AveragedModel, "update_parameters", "ema"),
        (torch.utils.data.dataloader._BaseDataLoaderIter, "__next__", "data"),
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


def count_fit(
    model: nn.Module,
    steps: int,
    batch: int,
    size: int,
    classes: int,
    cfg: dict,
    adamw: str = "foreach",
    modulation: str = "batched",
) -> _Tracker:
    model = copy.deepcopy(model)
    model.sampler_impl = "prepared"  # CUDA's sampler (NAC._sampler keeps "sparse" for the CPU)
    model.modulation_impl = modulation  # NAC.code_modulations: "per_layer" is the reference form
    for m in model.modules():
        if isinstance(m, attention.SKMDPA):
            m.attn_impl = "sdpa"  # CUDA's attention ("explicit" is CPU only)
    t = _Tracker()
    loop.ADAMW_IMPL = adamw  # CUDA's default AdamW is the foreach one
    train = TrainConfig.from_dict(
        {
            **cfg,
            "epochs": 1,
            "batch_size": batch,
            "augment": False,
            "num_workers": 0,
            "device": "cpu",
            "warmup_epochs": 0,
            "amp": False,
        }
    )
    with ExitStack() as stack:
        _mark_host_batches(stack)
        _instrument(model, t, stack)
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
) -> dict:
    a = count_fit(model, 2, batch, size, classes, cfg, adamw, modulation)
    b = count_fit(model, 3, batch, size, classes, cfg, adamw, modulation)
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
        help="the ModFCs' code modulation (NAC.modulation_impl; per_layer: the form before issue 21)",
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
            res[pair][name] = measure(model, a.batch, size, classes, train, a.adamw, a.modulation)
            print(pair, name, res[pair][name]["ops_total"], "ops", res[pair][name]["syncs_total"], "syncs", flush=True)
    results[a.label] = {**results.get(a.label, {}), **res}
    results.setdefault("machine", {})[a.label] = {
        "torch": torch.__version__,
        "batch": a.batch,
        "adamw": a.adamw,
        "modulation": a.modulation,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    md = table(results)
    out.with_suffix(".md").write_text(
        "# Aten ops and host syncs per steady-state training step (bench/bench_ops.py)\n\n"
        "CUDA's code paths taken on the CPU, fp32, paper-profile sizes (the `mini` pair: mini's image models); "
        "one step = fit(3 steps) - fit(2 steps).\n\n" + md + "\n\n" + NOTES
    )
    print(md)


if __name__ == "__main__":
    main()
