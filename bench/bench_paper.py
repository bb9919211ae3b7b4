"""Benchmark (not a test) of what users feel, in one run:

(a) NAC / Perceiver IO training-step time at bench/bench_circuits.py's sizes (batch 8, 256
    modules, width 384, depth 8, 32 px conv32 tokenizer), interleaved repeats, a 95% t CI of the
    per-repeat ratio;
(b) the read-in's fast path vs the direct per-module form (``nac/testing/reference_forms.py``'s
    ``direct_readin``) at the same sizes (64 tokens), forward + backward, a 95% t CI of the per-repeat ratio;
(c) Figure 5b at the paper's size: inference throughput of the paper-profile Tiny-ImageNet NAC
    (256 processor modules, ConvNeXt 3/3/9 tokenizer, 64 px, batch 32, one thread) with 0% and
    87.5% of the processor modules dropped (``drop_modules`` ranked by ``random_connectivity``;
    untrained weights), for the executor alone (tokens and circuit design precomputed) and the
    whole model; images/s per timed repeat, mean and 95% t CI (``nac.stats.mean_ci``);
(d) NAC / Perceiver IO training-step time at the mini profile's image sizes (params.yaml
    ``image.model``, batch 64, 32 px), trained as the pipeline trains them, interleaved blocks of
    steps (what decides the mini pipeline's budget).

    python bench/bench_paper.py [--repeats 10] [--threads 1] [--out bench/results/paper.json]

Prints a Markdown table and writes JSON.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from nac import ModelConfig, build_model
from nac.bench.models import paper_nac, pruned_forwards
from nac.bench.timing import ci as _ci
from nac.bench.timing import fmt
from nac.bench.timing import time_call as _time
from nac.circuits.readin import ReadIn
from nac.pipeline.params import read_params
from nac.testing.reference_forms import direct_readin
from nac.testing.reference_kernel import use_reference_kernel
from nac.training.optim import make_adamw

# bench/bench_circuits.py's defaults
SIZES = {"batch": 8, "modules": 256, "tokens": 64, "width": 384, "depth": 8}


def _reference_impls(model) -> None:
    """Switch a NAC to the plain forms of its step optimisations (the code before issue 14; they
    live in ``nac/testing/reference_kernel.py``, and tests/test_speed_equivalence.py proves both
    give the same step); the regularizer's plain form, numpy's default BLAS threads, is each timed
    step's ``graph_regularizer(blas_threads=None)``."""
    use_reference_kernel(model)


def _interleaved_steps(steps: dict, blocks: int, per_block: int = 1) -> tuple[dict, dict]:
    """Warm every step up twice, then time ``blocks`` interleaved blocks of ``per_block`` calls of
    each (so load changes hit all alike); wall-clock and CPU seconds per call, per block."""
    for fn in steps.values():  # warm-up
        fn(), fn()
    t = {v: [] for v in steps}
    c = {v: [] for v in steps}
    for _ in range(blocks):
        for v, fn in steps.items():
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(per_block):
                fn()
            t[v].append((time.perf_counter() - t0) / per_block)
            c[v].append((time.process_time() - c0) / per_block)
    return t, c


def _step_summary(out: dict, t: dict, c: dict) -> dict:
    """``out`` plus each step's CIs and the NAC (and plain NAC) over Perceiver IO ratios."""
    for v in t:
        out[f"{v}_s"], out[f"{v}_cpu_s"] = _ci(t[v]), _ci(c[v])
    for v in ("nac", "nac_plain"):
        name = "nac_over_pio" if v == "nac" else "nac_plain_over_pio"
        out[name] = _ci([a / b for a, b in zip(t[v], t["perceiver_io"])])
        out[f"{name}_cpu"] = _ci([a / b for a, b in zip(c[v], c["perceiver_io"])])
    return out


def bench_train_step(repeats: int, adamw: str = "default") -> dict:
    """Perceiver IO, the NAC, and the NAC with its plain (pre-optimisation) forms, interleaved;
    per repeat wall-clock and CPU (``time.process_time``) seconds, and per-repeat ratios."""
    s, steps = SIZES, {}
    for variant in ("perceiver_io", "nac", "nac_plain"):  # bench_circuits.bench_train_step's models
        torch.manual_seed(0)
        d = s["width"]
        cfg = ModelConfig(
            variant=variant.removesuffix("_plain"),
            num_classes=100,
            tokenizer={"kind": "conv32", "dim": 128, "pos_dim": 32},
            d_model=d,
            d_code=d,
            d_sig=64,
            n_processor=s["modules"],
            n_readout=8,
            depth=s["depth"],
            heads=6 if d % 6 == 0 else 4,
            ffn_mult=1.333,
            layer_scale=0.1,
        )
        model = build_model(cfg)
        if variant == "nac_plain":
            _reference_impls(model)
        opt = make_adamw(model.parameters(), lr=1e-4, impl=adamw)
        x = torch.randint(0, 256, (s["batch"], 3, 32, 32), dtype=torch.uint8)
        y = torch.randint(0, 100, (s["batch"],))

        def step(model=model, opt=opt, x=x, y=y, plain=variant == "nac_plain"):
            threads = None if plain else 1  # numpy's default threads: the plain form
            loss = F.cross_entropy(model(x), y) + 0.1 * model.graph.regularizer(blas_threads=threads)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps[variant] = step
    t, c = _interleaved_steps(steps, repeats)
    return _step_summary({**SIZES}, t, c)


def bench_mini_step(blocks: int, steps_per_block: int = 5, num_classes: int = 10, adamw: str = "default") -> dict:
    """(d) The mini profile's image models (params.yaml ``image.model``, ``image.train`` batch,
    32 px): Perceiver IO, the NAC (scale-free prior) and the NAC with its plain forms, trained as
    ``nac.training.loop`` does (AdamW with decay / no-decay groups, label smoothing, the graph
    regularizer, gradient clipping), ``blocks`` interleaved blocks of ``steps_per_block`` steps
    each; seconds per step (wall, CPU) and the per-block NAC / PIO ratios."""

    from nac.tracks.image import image_model_config

    params = read_params(Path("params.yaml"))
    tr = params["image"]["train"]
    size = int(params["image"]["model"]["tokenizer"].get("image_size", 32))
    steps = {}
    for variant, run in (("perceiver_io", "perceiver_io"), ("nac", "nac-scale_free"), ("nac_plain", "nac-scale_free")):
        torch.manual_seed(0)
        model = build_model(image_model_config(params, run, seed=0, num_classes=num_classes))
        if variant == "nac_plain":
            _reference_impls(model)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "signatures" not in n and "codes" not in n]
        no_decay = [
            p for n, p in model.named_parameters() if not (p.dim() >= 2 and "signatures" not in n and "codes" not in n)
        ]
        opt = make_adamw(
            [{"params": decay, "weight_decay": tr["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
            lr=tr["lr"],
            impl=adamw,
        )
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (tr["batch_size"], 3, size, size), dtype=torch.uint8, generator=g)
        y = torch.randint(0, num_classes, (tr["batch_size"],), generator=g)

        def step(model=model, opt=opt, x=x, y=y, plain=variant == "nac_plain"):
            loss = F.cross_entropy(model(x), y, label_smoothing=tr["label_smoothing"])
            loss = loss + tr["reg_weight"] * model.graph.regularizer(blas_threads=None if plain else 1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tr["grad_clip"])
            opt.step()

        steps[variant] = step
    t, c = _interleaved_steps(steps, blocks, steps_per_block)
    return _step_summary(
        {
            "batch": tr["batch_size"],
            "image_size": size,
            "model": "params.yaml image.model",
            "steps": blocks * steps_per_block,
            "steps_per_block": steps_per_block,
        },
        t,
        c,
    )


def bench_readin(repeats: int) -> dict:
    s = SIZES
    torch.manual_seed(0)
    d = s["width"]
    readin = ReadIn(d_in=d, d=d, d_code=d, heads=1)
    tokens = torch.randn(s["batch"], s["tokens"], d)
    states, codes = torch.randn(s["modules"], d), torch.randn(s["modules"], d)
    readins = {"fast": readin, "direct": copy.deepcopy(readin)}  # the same weights
    direct_readin(readins["direct"])
    fns = {}
    for impl, layer in readins.items():

        def whole(layer=layer):
            layer.zero_grad(set_to_none=True)
            layer(tokens, states, codes).sum().backward()

        fns[impl] = whole
    for fn in fns.values():
        fn(), fn()
    t = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t[k].append(_time(fn))
    out = {**{k: v for k, v in SIZES.items() if k != "depth"}, "heads": 1, **{f"{k}_s": _ci(v) for k, v in t.items()}}
    if "fast" in t and "direct" in t:
        out["direct_over_fast"] = _ci([a / b for a, b in zip(t["direct"], t["fast"])])
    return out


def bench_throughput(repeats: int, batch: int, fractions=(0.0, 0.875)) -> dict:
    model, params = paper_nac()  # outside no_grad: the signature fit trains
    with torch.no_grad():
        return _throughput(model, params, repeats, batch, fractions)


def _throughput(model, params, repeats: int, batch: int, fractions) -> dict:
    from nac.pruning import random_connectivity

    model.eval()
    m = params["image"]["model"]
    U = model.config.n_processor
    size = int(m["tokenizer"]["image_size"])
    x = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = {
        "model": "paper profile image.model, nac-scale_free (untrained)",
        "tokenizer": m["tokenizer"],
        "n_processor": U,
        "batch": batch,
        "image_size": size,
        "rows": [],
    }
    fns = pruned_forwards(model, x, fractions, random_connectivity(U, seed=0))
    for frac in fractions:
        row = {"dropped_fraction": frac, "kept_modules": U - int(round(frac * U))}
        for name in ("executor", "whole"):
            fn = fns[frac][name]
            fn()  # warm-up
            row[f"{name}_images_per_s"] = _ci([batch / _time(fn) for _ in range(repeats)])
        out["rows"].append(row)
    full, pruned = out["rows"][0], out["rows"][-1]
    for name in ("executor", "whole"):
        out[f"{name}_speedup"] = pruned[f"{name}_images_per_s"]["mean"] / full[f"{name}_images_per_s"]["mean"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32, help="(c)'s inference batch")
    ap.add_argument("--out", default="bench/results/paper.json")
    ap.add_argument("--only-step", action="store_true", help="(a) (and (d)) only")
    ap.add_argument(
        "--mini-blocks",
        type=int,
        default=6,
        help="(d)'s interleaved blocks of 5 steps at the mini profile's image sizes (0: skip)",
    )
    ap.add_argument(
        "--adamw",
        choices=["default", "foreach", "fused"],
        default="default",
        help="AdamW implementation for (a) and (d) (train.adamw: nac.training.optim.make_adamw)",
    )
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    res = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "repeats": a.repeats,
            "cores": os.cpu_count(),
            "adamw": a.adamw,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "load_average_start": list(os.getloadavg()),
        }
    }
    res["train_step"] = bench_train_step(a.repeats, a.adamw)
    if a.mini_blocks:
        res["mini_step"] = bench_mini_step(a.mini_blocks, adamw=a.adamw)
    if not a.only_step:
        res["readin"] = bench_readin(a.repeats)
        res["figure5b"] = bench_throughput(a.repeats, a.batch)
    res["machine"]["wall_s"] = time.perf_counter() - t0
    res["machine"]["load_average_end"] = list(os.getloadavg())
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    ts, ri, f5 = res["train_step"], res.get("readin"), res.get("figure5b")
    lines = [
        f"| measurement | value (mean [95% CI], n={a.repeats}) |",
        "|---|---|",
        f"| (a) train step B=8 U=256 d=384 depth 8: Perceiver IO ms | {fmt(ts['perceiver_io_s'], 1e3)} |",
        f"| (a) train step: NAC ms | {fmt(ts['nac_s'], 1e3)} |",
        f"| (a) NAC / PIO step-time ratio | {fmt(ts['nac_over_pio'], digits=2)} |",
        f"| (a) NAC / PIO, CPU time | {fmt(ts['nac_over_pio_cpu'], digits=2)} |",
        f"| (a) NAC, plain forms (before issue 14's optimisations) ms | {fmt(ts['nac_plain_s'], 1e3)} |",
        f"| (a) NAC plain forms / PIO | {fmt(ts['nac_plain_over_pio'], digits=2)} |",
        f"| (a) NAC plain forms / PIO, CPU time | {fmt(ts['nac_plain_over_pio_cpu'], digits=2)} |",
    ]
    ms = res.get("mini_step")
    if ms is not None:
        lines += [
            f"| (d) mini image.model step B={ms['batch']}: Perceiver IO ms | {fmt(ms['perceiver_io_s'], 1e3)} |",
            f"| (d) mini step: NAC ms | {fmt(ms['nac_s'], 1e3)} |",
            f"| (d) mini NAC / PIO step-time ratio | {fmt(ms['nac_over_pio'], digits=2)} |",
            f"| (d) mini NAC / PIO, CPU time | {fmt(ms['nac_over_pio_cpu'], digits=2)} |",
            f"| (d) mini NAC plain forms / PIO | {fmt(ms['nac_plain_over_pio'], digits=2)} |",
        ]
    if ri is not None:
        lines += [
            f"| (b) read-in U=256 T=64 d=384 B=8 fwd+bwd: fast ms | {fmt(ri['fast_s'], 1e3)} |",
            f"| (b) read-in: direct ms | {fmt(ri['direct_s'], 1e3)} |",
            f"| (b) direct / fast ratio | {fmt(ri['direct_over_fast'], digits=2)} |",
        ]
    for row in f5["rows"] if f5 is not None else []:
        for name in ("executor", "whole"):
            lines.append(
                f"| (c) Fig. 5b, {row['dropped_fraction']:.1%} dropped ({row['kept_modules']} modules), "
                f"{name}, images/s | {fmt(row[f'{name}_images_per_s'])} |"
            )
    if f5 is not None:
        lines += [
            f"| (c) speed-up at 87.5% dropped, executor | x{f5['executor_speedup']:.2f} |",
            f"| (c) speed-up at 87.5% dropped, whole model | x{f5['whole_speedup']:.2f} |",
        ]
    m = res["machine"]
    print(
        f"threads={torch.get_num_threads()} repeats={a.repeats} adamw={a.adamw} wall={m['wall_s']:.0f}s "
        f"load {m['load_average_start'][0]:.1f} -> {m['load_average_end'][0]:.1f} ({m['cores']} cores)"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
