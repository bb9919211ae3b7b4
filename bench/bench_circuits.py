"""Benchmark (not a test): the read-in's fast path against the direct per-module form (the
reference, ``nac/testing/reference_forms.py``'s ``direct_readin``), and a
NAC training step against a Perceiver IO training step at equal width, modules and depth.

    python bench/bench_circuits.py [--device cpu|cuda] [--out bench/results/circuits.json]

Prints a table and writes JSON. Times are medians over repeats after warm-up.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from nac import ModelConfig, build_model
from nac.circuits.readin import ReadIn
from nac.pipeline.io import write_json
from nac.testing.reference_forms import direct_readin


def timeit(fn, device: str, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_readin(device: str, batch: int, U: int, T: int, d: int, heads: int, repeats: int) -> dict:
    torch.manual_seed(0)
    readin = ReadIn(d_in=d, d=d, d_code=d, heads=heads).to(device)
    tokens = torch.randn(batch, T, d, device=device)
    states, codes = torch.randn(U, d, device=device), torch.randn(U, d, device=device)
    x, h = readin.norm_tokens(tokens).detach(), readin.norm_states(states).expand(batch, U, d).detach()
    readins = {"fast": readin, "direct": copy.deepcopy(readin)}  # the same weights
    direct_readin(readins["direct"])
    out = {}
    for impl, layer in readins.items():

        def whole(layer=layer):  # the read-in layer: attention, exit ModFC and ModFFN
            layer.zero_grad(set_to_none=True)
            layer(tokens, states, codes).sum().backward()

        def attention(layer=layer):  # the part that differs: eq. 4's keys/values and the weighted sum
            layer.zero_grad(set_to_none=True)
            layer.attend(x, h, codes).sum().backward()

        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        out[f"{impl}_s"] = timeit(whole, device, repeats)
        out[f"{impl}_attention_s"] = timeit(attention, device, repeats)
        if device == "cuda":
            out[f"{impl}_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    out["speedup"] = out["direct_s"] / out["fast_s"]
    out["attention_speedup"] = out["direct_attention_s"] / out["fast_attention_s"]
    with torch.no_grad():
        a, b = (layer(tokens, states, codes) for layer in readins.values())
    out["max_abs_diff"] = (a - b).abs().max().item()
    return out


def bench_train_step(device: str, batch: int, U: int, d: int, depth: int, repeats: int) -> dict:
    out = {}
    for variant in ("perceiver_io", "nac"):
        torch.manual_seed(0)
        cfg = ModelConfig(
            variant=variant,
            num_classes=100,
            tokenizer={"kind": "conv32", "dim": 128, "pos_dim": 32},
            d_model=d,
            d_code=d,
            d_sig=64,
            n_processor=U,
            n_readout=8,
            depth=depth,
            heads=6 if d % 6 == 0 else 4,
            ffn_mult=1.333,
            layer_scale=0.1,
        )
        model = build_model(cfg).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, device=device)
        y = torch.randint(0, 100, (batch,), device=device)

        def step():
            loss = F.cross_entropy(model(x), y) + 0.1 * model.graph.regularizer()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        out[f"{variant}_s"] = timeit(step, device, repeats)
        out[f"{variant}_params"] = sum(p.numel() for p in model.parameters())
    out["nac_over_pio"] = out["nac_s"] / out["perceiver_io_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modules", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--out", default="bench/results/circuits.json")
    a = ap.parse_args()
    res = {
        "machine": {
            "device": a.device,
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None,
        },
        "readin": {
            "batch": a.batch,
            "modules": a.modules,
            "tokens": a.tokens,
            "width": a.width,
            "heads": 1,
            **bench_readin(a.device, a.batch, a.modules, a.tokens, a.width, 1, a.repeats),
        },
        "train_step": {
            "batch": a.batch,
            "modules": a.modules,
            "width": a.width,
            "depth": a.depth,
            "tokens": 64,
            **bench_train_step(a.device, a.batch, a.modules, a.width, a.depth, a.repeats),
        },
    }
    r, t = res["readin"], res["train_step"]
    print(
        f"read-in  U={a.modules} T={a.tokens} d={a.width} B={a.batch} (forward+backward): "
        f"whole layer: fast {r['fast_s'] * 1e3:.1f} ms, direct {r['direct_s'] * 1e3:.1f} ms (x{r['speedup']:.1f}); "
        f"attention only: fast {r['fast_attention_s'] * 1e3:.1f} ms, direct {r['direct_attention_s'] * 1e3:.1f} ms "
        f"(x{r['attention_speedup']:.1f}); max |diff| {r['max_abs_diff']:.1e}"
    )
    print(
        f"train step U={a.modules} d={a.width} depth={a.depth} B={a.batch}: "
        f"Perceiver IO {t['perceiver_io_s'] * 1e3:.0f} ms, "
        f"NAC {t['nac_s'] * 1e3:.0f} ms, NAC / PIO = {t['nac_over_pio']:.2f}"
    )
    write_json(a.out, res)


if __name__ == "__main__":
    main()
