"""The measuring parts of the GPU window (``nac.bench.window``), each run in a process of its
own (``--child``): the bf16 training step as the loop takes it, eager, compiled and with CUDA
graphs (``measure_step``: compilation, dynamo's counts, host syncs by torch's sync debug mode,
memory, interleaved timed blocks), and module dropping's throughput (``measure_throughput``).
``dry``: the CPU dry run's tiny models (``DRY_PARAMS``). And what the window records of itself:
the machine (``machine``) and the code and params it ran (``provenance``)."""

from __future__ import annotations

import hashlib
import itertools
import os
import platform
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: nac/bench/window_measure.py)
SMI_NAME = "nvidia-smi.txt"
# the window's own code, hashed into its provenance
BENCH_FILES = (
    "bench/gpu_window.py",
    "nac/bench/window.py",
    "nac/bench/window_measure.py",
    "nac/bench/models.py",
    "nac/bench/timing.py",
)

DRY_PARAMS = ["profile=smoke", "image.model.signature_fit_steps=20"]  # the dry run's models: tiny, quick to build


def _device_and_params(dry: bool):
    import torch

    from nac.pipeline.params import compose

    device = torch.device("cpu" if dry else "cuda")
    return device, compose(DRY_PARAMS if dry else ["profile=paper"])


def _sync(device):
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def loop_step(model, params: dict, batch: int, mode, device):
    """A closure taking one training step of ``model`` as ``nac.training.loop.fit`` does
    (``loop.train_step`` on the run ``nac.training.run.build_run`` makes) with the paper's ``image.train``
    settings, ``train.compile: mode`` (scope ``step`` when compiled), on one fixed batch already on
    ``device``; augmentation, EMA and the loader off (not the step's)."""
    import torch

    from nac.bench.models import Synthetic, inputs
    from nac.training import loop
    from nac.training.config import TrainConfig
    from nac.training.distributed import World
    from nac.training.run import build_run

    tr = dict(params["image"]["train"], epochs=1, warmup_epochs=0, batch_size=batch, augment=False, num_workers=0)
    tr.update(ema=None, device=device.type, compile=mode, compile_scope="step" if mode else "forward")
    tr.pop("lr_batch_scaling", None)
    size = params["image"]["model"]["tokenizer"]["image_size"]
    run = build_run(
        model,
        Synthetic(batch, size),
        None,
        TrainConfig.from_dict(tr),
        World(0, 1, device),
        None,
        "gpu window",
        None,
        None,
    )
    run.sums = torch.zeros(4, dtype=torch.float64, device=device)  # the epoch's metric sums, as fit sets them
    x, y = inputs(batch, size, device)
    data, count = {"input": x, "label": y}, itertools.count()
    return lambda: loop.train_step(run, data, 0, next(count))


def _dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values())}


def _sync_warnings(fn) -> list:
    """The warnings torch's sync debug mode raises while ``fn()`` runs (one per synchronizing CUDA
    call)."""
    import torch

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [w for w in seen if "synchroniz" in str(w.message)]


def _known_sync() -> None:
    import torch

    torch.ones(1, device="cuda").item()  # one blocking copy to the host


def count_syncs(step, n: int, device, probe=_known_sync) -> dict:
    """Host syncs in ``n`` steps as torch's sync debug mode sees them, per step, with the Python
    lines that made them. ``probe``, a known single sync, must be seen first: if the mode's
    warnings do not reach Python, no count is given (rather than a false 0)."""
    import torch

    if device.type != "cuda":
        return {"syncs_per_step": None, "note": "torch's sync debug mode sees CUDA syncs only"}
    seen_probe = len(_sync_warnings(probe))
    if seen_probe != 1:
        return {"syncs_per_step": None, "note": f"the sync debug mode saw {seen_probe} syncs in one known sync"}

    def steps():
        for _ in range(n):
            step()

    syncs = _sync_warnings(steps)
    torch.cuda.synchronize()
    where = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
    return {"syncs_per_step": len(syncs) / n, "steps": n, "where": dict(where.most_common(10))}


def measure_step(mode, batch: int, blocks: int, steps: int, until: float, dry: bool, save) -> dict:
    """One ``STEP_MODES`` mode: per model the compilation, syncs and memory, then interleaved
    blocks of steps fitted to ``until`` (a ``time.time()``); ``save(res)`` after each stage."""
    import torch

    from nac.bench.models import paper_model
    from nac.bench.timing import ci, timed_blocks

    device, params = _device_and_params(dry)
    sync = _sync(device)
    used = "aot_eager" if (dry and mode) else mode  # the CPU stands in with traced, uncompiled steps
    res = {"compile": mode, "compile_used": used, "scope": "step" if mode else "eager", "batch": batch, "models": {}}
    res["amp"] = "bf16" if device.type == "cuda" else "fp32 (CPU)"
    fns = {}
    for name, run in (("perceiver_io", "perceiver_io"), ("nac", "nac-scale_free")):
        before = _dynamo_counts()
        step = loop_step(paper_model(params, run), params, batch, used, device)
        times = []
        for _ in range(3):  # the first: compilation; reduce-overhead records its graphs in the next
            sync()
            t0 = time.perf_counter()
            step()
            sync()
            times.append(time.perf_counter() - t0)
        compiled = _dynamo_counts()
        row = {"first_step_s": times[0], "next_steps_s": times[1:]}
        row.update({k: compiled[k] - before[k] for k in compiled})
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            resident = torch.cuda.memory_allocated()
        row.update(count_syncs(step, 3, device))
        if device.type == "cuda":
            row["memory_gib"] = {
                "resident_before_step": resident / 2**30,
                "peak_allocated": torch.cuda.max_memory_allocated() / 2**30,
                "peak_reserved": torch.cuda.max_memory_reserved() / 2**30,
                "note": "the process's: the models built before this one stay resident",
            }
        res["models"][name] = row
        fns[name] = step
        save(res)
    per_block = steps * sum(r["next_steps_s"][-1] for r in res["models"].values())
    warmup = 3 * per_block / steps  # timed_blocks's 3 warm-up steps of each
    fit = int((until - time.time() - warmup) // per_block) if per_block > 0 else blocks
    res["blocks_requested"], res["blocks"], res["steps_per_block"] = blocks, max(0, min(blocks, fit)), steps
    if res["blocks"] == 0:
        res["timing"] = "no block fitted in the part's share after the compilations"
        return res
    before = _dynamo_counts()
    t = timed_blocks(fns, res["blocks"], steps, sync=sync)
    res["recompiles_in_blocks"] = _dynamo_counts()["graphs"] - before["graphs"]
    res["s_per_step"] = {k: ci(v) for k, v in t.items()}
    res["images_per_s"] = {k: batch / v["mean"] for k, v in res["s_per_step"].items()}
    res["nac_over_pio"] = ci([a / b for a, b in zip(t["nac"], t["perceiver_io"])])
    if res["blocks"] < 2:
        res["timing"] = "one block fitted: no CI"
    return res


def measure_throughput(batches: list[int], blocks: int, until: float, dry: bool, save) -> dict:
    """``nac.bench.models.pruned_throughput`` at each batch of ``batches`` while the part's time lasts."""
    from nac.bench.models import pruned_throughput

    device, params = _device_and_params(dry)
    res = {"model": "paper profile image.model, nac-scale_free (untrained)" if not dry else "smoke profile (dry run)"}
    for b in batches:
        if time.time() > until:
            res[f"batch_{b}"] = {"skipped": "the part's share ran out"}
            continue
        t0 = time.perf_counter()
        res[f"batch_{b}"] = pruned_throughput(
            params, blocks, b, (0.0, 0.875), device=device.type, steps=2 if dry else 10
        )
        res[f"batch_{b}"]["wall_s"] = time.perf_counter() - t0
        save(res)
    return res


def machine(out: Path, dry: bool) -> dict:
    """What ran the window; ``nvidia-smi``'s output to ``out/nvidia-smi.txt``."""
    import torch

    def smi(*args) -> str:
        try:
            p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
            return p.stdout + p.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"nvidia-smi: {type(e).__name__}: {e}"

    (out / SMI_NAME).write_text(smi(), encoding="utf-8")
    query = smi("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader").strip()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available()
    return {
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "gpus": torch.cuda.device_count() if cuda else 0,
        "nvidia_smi_query": query,
        "driver": query.split(",")[1].strip() if cuda and query.count(",") >= 2 else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "triton": triton_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_dry_run": dry,
    }


def provenance(overrides: list[str]) -> dict:
    from nac.pipeline.params import compose
    from nac.provenance import code_fingerprint, git_commit, params_hash

    h = hashlib.sha256()
    for rel in BENCH_FILES:
        h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    return {
        **git_commit(ROOT),
        "code": code_fingerprint(ROOT),
        "bench_sha256": h.hexdigest(),
        "params": overrides,
        "params_sha256": params_hash(compose(overrides)),
        "command": " ".join(sys.argv),
    }
