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

import torch

from nac import repo
from nac.bench.models import Synthetic, inputs, paper_model, pruned_throughput
from nac.bench.step_ops import pairs
from nac.bench.timing import ci, timed_blocks
from nac.pipeline.params import compose
from nac.provenance import code_fingerprint, git_commit, params_hash
from nac.registry import build_model
from nac.tracks.image import image_model_config
from nac.training import loop
from nac.training.config import TrainConfig
from nac.training.distributed import World
from nac.training.graphed import GraphedStep
from nac.training.run import EpochState, build_run

ROOT = repo.ROOT
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
    device = torch.device("cpu" if dry else "cuda")
    return device, compose(DRY_PARAMS if dry else ["profile=paper"])


def _sync(device):
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


FORMS = ("eager", "graphed", "compiled")  # the step as train.cuda_graphs / train.compile take it
SIZES = ("tiny", "imagenet")  # the paper's Tiny-ImageNet pair and its ImageNet pre-training pair
IMAGENET_BLOCKS = (3, 3)  # blocks x steps at the ImageNet size (a NAC step there is near a second eager)


def form_settings(form: str, dry: bool) -> dict:
    """``train`` settings of a step ``form``: ``eager``; ``graphed`` (``train.cuda_graphs: true``;
    the dry run: the CPU stand-in, set on the run by ``loop_step``); ``compiled`` (``train.compile:
    default``, ``compile_scope: regional``: each repeated layer on its own; the dry run ``aot_eager``)."""
    if form not in FORMS:
        raise ValueError(f"unknown step form {form!r}; valid: {', '.join(FORMS)}")
    if form == "graphed":
        return {"cuda_graphs": not dry}
    if form == "compiled":
        return {"compile": "aot_eager" if dry else "default", "compile_scope": "regional"}
    return {}


def loop_step(model, train: dict, batch: int, form: str, device, size: int, classes: int, dry: bool = False):
    """A closure taking one training step of ``model`` as ``nac.training.loop.fit`` does
    (``loop.train_step`` on the run ``nac.training.run.build_run`` makes) with the ``train``
    settings (the paper's ``image.train``) in step ``form`` (``form_settings``), on one fixed batch
    already on ``device``; augmentation, EMA and the loader off (not the step's)."""
    tr = dict(train, epochs=1, warmup_epochs=0, batch_size=batch, augment=False, num_workers=0)
    tr.update(ema=None, device=device.type, compile=False, compile_scope="forward", cuda_graphs=False)
    tr.update(form_settings(form, dry))
    tr.pop("lr_batch_scaling", None)
    cfg = TrainConfig.from_dict(tr)
    data_set, world = Synthetic(batch, size, classes), World(0, 1, device)
    run = build_run(model, data_set, None, cfg, world, None, "gpu window", None, None)
    if form == "graphed" and dry:  # the CPU: the same step with each capture replaced by running it
        run.graphed = GraphedStep(run, capture=False)
    now = EpochState.of(run)  # the epoch's metric sums, as fit makes them
    x, y = inputs(batch, size, device, classes)
    data, count = {"input": x, "label": y}, itertools.count()
    return lambda: loop.train_step(run, now, data, 0, next(count))


def _dynamo_counts() -> dict:
    # deferred: torch._dynamo costs ~2 s after torch; the step parts count graphs, the others never
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values())}


def _sync_warnings(fn) -> list:
    """The warnings torch's sync debug mode raises while ``fn()`` runs (one per synchronizing CUDA
    call)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [w for w in seen if "synchroniz" in str(w.message)]


def _known_sync() -> None:
    torch.ones(1, device="cuda").item()  # one blocking copy to the host


def count_syncs(step, n: int, device, probe=_known_sync) -> dict:
    """Host syncs in ``n`` steps as torch's sync debug mode sees them, per step, with the Python
    lines that made them. ``probe``, a known single sync, must be seen first: if the mode's
    warnings do not reach Python, no count is given (rather than a false 0)."""
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


def _pair(size: str, dry: bool):
    """``(models {"perceiver_io", "nac"}, image size, classes, train settings)`` of a size; the dry
    run's: the smoke profile's tiny image models."""
    if dry:
        params = compose(DRY_PARAMS)
        train = {k: v for k, v in params["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
        models = {"perceiver_io": paper_model(params, "perceiver_io"), "nac": paper_model(params, "nac-scale_free")}
        return models, params["image"]["model"]["tokenizer"]["image_size"], 200, train
    models, px, classes, train = pairs([size])[size]
    pair = {"perceiver_io": models["perceiver_io"], "nac": models.get("nac", models.get("nac-scale_free"))}
    return pair, px, classes, train


def measure_step(form: str, batch: int, blocks: int, steps: int, until: float, dry: bool, save, sizes=SIZES) -> dict:
    """One step ``form`` (``FORMS``) at each of ``sizes``: per model the first four steps (a compiled
    form's compilation in the first, a graphed form's capture in the third: two eager warm-up steps
    come first), dynamo's counts, host syncs and memory, then interleaved blocks of steps fitted to
    ``until`` (a ``time.time()``); ``save(res)`` after each stage. The dry run: the tiny size only."""
    device = torch.device("cpu" if dry else "cuda")
    sync = _sync(device)
    res = {"form": form, "settings": form_settings(form, dry), "batch": batch, "sizes": {}}
    res["amp"] = "bf16" if device.type == "cuda" else "fp32 (CPU)"
    for size in sizes[:1] if dry else sizes:
        if size != sizes[0] and time.time() > until - 10:  # the first size's first steps are always measured
            res["sizes"][size] = {"skipped": "the part's share ran out"}
            save(res)
            continue
        blocks_here, steps_here = (blocks, steps) if size == "tiny" or dry else IMAGENET_BLOCKS
        out = res["sizes"][size] = {"models": {}}
        models, px, classes, train = _pair(size, dry)
        fns = {}
        for name, model in models.items():
            before = _dynamo_counts()
            t0 = time.perf_counter()
            step = loop_step(model, train, batch, form, device, px, classes, dry)
            times = []
            for _ in range(4):  # compiled: the first compiles; graphed: two eager, then the capture
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - t0)
            counts = _dynamo_counts()
            row = {"first_steps_s": times, "first_step_s": times[0]}
            row.update({k: counts[k] - before[k] for k in counts})
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            row.update(count_syncs(step, 3, device))
            if device.type == "cuda":
                row["memory_gib"] = {
                    "peak_allocated": torch.cuda.max_memory_allocated() / 2**30,
                    "peak_reserved": torch.cuda.max_memory_reserved() / 2**30,
                    "note": "the process's, over 3 steps: models built before this one stay resident",
                }
            out["models"][name] = row
            fns[name] = step
            save(res)
        per_block = steps_here * sum(r["first_steps_s"][-1] for r in out["models"].values())
        warmup = 3 * per_block / steps_here  # timed_blocks's 3 warm-up steps of each
        fit = int((until - time.time() - warmup) // per_block) if per_block > 0 else blocks_here
        out["blocks_requested"], out["steps_per_block"] = blocks_here, steps_here
        out["blocks"] = max(0, min(blocks_here, fit))
        if out["blocks"] == 0:
            out["timing"] = "no block fitted in the part's share after the first steps"
            save(res)
            continue
        before = _dynamo_counts()
        t = timed_blocks(fns, out["blocks"], steps_here, sync=sync)
        out["recompiles_in_blocks"] = _dynamo_counts()["graphs"] - before["graphs"]
        out["s_per_step"] = {k: ci(v) for k, v in t.items()}
        out["images_per_s"] = {k: batch / v["mean"] for k, v in out["s_per_step"].items()}
        out["nac_over_pio"] = ci([a / b for a, b in zip(t["nac"], t["perceiver_io"])])
        if out["blocks"] < 2:
            out["timing"] = "one block fitted: no CI"
        del fns, models
        if device.type == "cuda":
            torch.cuda.empty_cache()
        save(res)
    return res


def mini_worker(graphed: bool, run_name: str, start_at: float, end_at: float, dry: bool, save) -> dict:
    """One worker of ``measure_workers``: the mini profile's ``run_name`` at mini's batch, built and
    warmed up (the capture included), then steps from ``start_at`` to ``end_at`` (epoch seconds,
    shared by every worker of the round): ``{"steps", "seconds", "steps_per_s"}``."""
    torch.set_num_threads(1)
    device = torch.device("cpu" if dry else "cuda")
    params = compose(DRY_PARAMS if dry else ["profile=mini"])
    train = {k: v for k, v in params["image"]["train"].items() if k in TrainConfig.__dataclass_fields__}
    torch.manual_seed(0)
    model = build_model(image_model_config(params, run_name, seed=0, num_classes=10))
    px = params["image"]["model"]["tokenizer"]["image_size"]
    step = loop_step(model, train, int(train["batch_size"]), "graphed" if graphed else "eager", device, px, 10, dry)
    for _ in range(4):  # two eager warm-up steps and the capture
        step()
    _sync(device)()
    res = {"run": run_name, "graphed": graphed, "ready_late": time.time() > start_at}
    while time.time() < start_at:
        time.sleep(0.01)
    n, t0 = 0, time.perf_counter()
    while time.time() < end_at:
        step()
        n += 1
    _sync(device)()
    seconds = time.perf_counter() - t0
    res.update(steps=n, seconds=seconds, steps_per_s=n / seconds)
    save(res)
    return res


def measure_throughput(batches: list[int], blocks: int, until: float, dry: bool, save) -> dict:
    """``nac.bench.models.pruned_throughput`` at each batch of ``batches`` while the part's time lasts."""
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

    def smi(*args) -> str:
        try:
            p = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
            return p.stdout + p.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"nvidia-smi: {type(e).__name__}: {e}"

    (out / SMI_NAME).write_text(smi(), encoding="utf-8")
    query = smi("--query-gpu=name,driver_version,memory.total", "--format=csv,noheader").strip()
    try:
        import triton  # deferred: optional (absent without CUDA), probed here

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
    h = hashlib.sha256()
    for rel in BENCH_FILES:
        h.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes() + b"\0")
    commit = git_commit(ROOT)  # None where the copy has no .git of its own (not the repository around it)
    if commit["commit"] is None:
        commit = {"commit": "unknown", "dirty": None, "commit_from": "the copy has no .git of its own"}
    return {
        **commit,
        "code": code_fingerprint(ROOT),
        "bench_sha256": h.hexdigest(),
        "params": overrides,
        "params_sha256": params_hash(compose(overrides)),
        "command": " ".join(sys.argv),
    }
