"""Benchmark (not a test; needs a CUDA device): the paper profile on a GPU (issue 14, item 5).

Parts (``--parts``, all by default):

* ``step``: the paper profile's Tiny-ImageNet Perceiver IO and NAC (``image.ladder`` runs
  ``perceiver_io`` and ``nac-scale_free``, composed ``paper`` params, 200 classes) trained as
  ``nac.training.loop`` does one step (``Objective`` forward: logits + graph regularizer;
  label-smoothed cross-entropy; AdamW; gradient norm), at ``image.train.batch_size`` (128), in
  bf16 autocast and in fp32. Steps are timed with ``torch.cuda.synchronize`` around blocks of
  ``--steps`` steps, the models interleaved block by block (``--blocks``), so each block gives one
  NAC / Perceiver IO ratio; mean and 95% t CI over blocks.
* ``ladder``: the bf16 step at batch 128 of every Table 1 rung and of the two ImageNet
  pre-training models (224 px), 3 blocks each; bench_paper_cost.py ``--measured`` uses them.
* ``memory``: the peak CUDA memory (``torch.cuda.max_memory_allocated``) of one bf16 training
  step of the same NAC with 1024 processor modules at batch 128 (and of the 256-module one).
* ``throughput``: Figure 5b on the GPU - images/s of the paper-size NAC (eval, bf16 autocast,
  batch ``--eval-batch``) for 0% and 87.5% of processor modules dropped (least connected first,
  ``nac.pruning.drop_modules``), whole model and executor alone (tokenizer output precomputed),
  blocks interleaved over the two, CI over blocks.
* ``compiled``: ``step`` in bf16 with the forward through ``torch.compile`` (not what the loop
  does: how much of the step is Python and kernel-launch overhead).
* ``profile``: ``torch.profiler`` tables of the bf16 steps and of a batch-256 NAC forward.
* ``ddp``: ``nac.training.loop.fit`` under two processes (``torch.distributed``, world size 2)
  for one short epoch of synthetic 64 px images with the paper-size NAC: NCCL when the machine
  has two GPUs; with one GPU both ranks share it over gloo (NCCL refuses two ranks on one GPU).
  Checks that both ranks end with identical weights and reports the seconds per step.

    python bench/bench_gpu.py [--parts step memory throughput ddp] [--out bench/results/gpu.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.bench.models import TINY_CLASSES as CLASSES
from nac.bench.models import Synthetic, inputs, paper_model, pretrain_model, pruned_throughput
from nac.bench.timing import ci, timed_blocks
from nac.pipeline.params import compose
from nac.registry import count_parameters
from nac.training.optim import make_adamw
from nac.training.run import Objective


def make_step(
    model: nn.Module,
    params: dict,
    batch: int,
    amp: bool,
    compile: bool = False,
    image_size: int | None = None,
    num_classes: int = CLASSES,
):
    """One training step as ``nac.training.loop`` takes it (without the data loader);
    ``compile``: the forward through ``torch.compile`` (not what the loop does; a measurement of
    how much of the step is Python and kernel-launch overhead)."""
    tr = params["image"]["train"]
    device = torch.device("cuda")
    model.to(device).train()
    objective = torch.compile(Objective(model)) if compile else Objective(model)
    opt = make_adamw(model.parameters(), lr=tr["lr"])
    x, y = inputs(batch, image_size or params["image"]["model"]["tokenizer"]["image_size"], device, num_classes)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits, reg = objective(x)
            loss = (
                F.cross_entropy(logits.float(), y, label_smoothing=tr["label_smoothing"])
                + tr["reg_weight"] * reg.float()
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
        opt.step()
        return loss

    return step


def part_step(params: dict, blocks: int, steps: int, modes=("bf16", "fp32")) -> dict:
    batch = params["image"]["train"]["batch_size"]
    out = {"batch": batch, "blocks": blocks, "steps_per_block": steps}
    for key in modes:
        fns, n_params = {}, {}
        for run in ("perceiver_io", "nac-scale_free"):
            model = paper_model(params, run)
            n_params[run] = count_parameters(model)
            fns[run] = make_step(model, params, batch, amp=key != "fp32", compile=key == "bf16_compiled")
        t = timed_blocks(fns, blocks, steps, sync=torch.cuda.synchronize)
        out[key] = {f"{k}_s_per_step": ci(v) for k, v in t.items()}
        out[key]["nac_over_pio"] = ci([a / b for a, b in zip(t["nac-scale_free"], t["perceiver_io"])])
        out[key]["images_per_s"] = {k: batch / out[key][f"{k}_s_per_step"]["mean"] for k in t}
        out["parameters"] = n_params
        del fns
        torch.cuda.empty_cache()
    return out


def part_ladder(params: dict, blocks: int, steps: int) -> dict:
    """The bf16 training step at batch 128 (one GPU's share of the pre-training batch) of every
    model the paper profile trains on images: each Table 1 rung and the two ImageNet
    pre-training models; rows named as bench_paper_cost.py's."""
    batch = params["image"]["train"]["batch_size"]
    models = {f"Table 1: {run}": (lambda run=run: paper_model(params, run)) for run in params["image"]["ladder"]}
    for name in ("nac", "perceiver_io"):
        models[f"Figure 4 pre-training: {name}"] = lambda name=name: pretrain_model(params, name)
    rows = {}
    for what, build in models.items():
        try:
            model = build()
            size = (
                params["fewshot"]["pretrain"]["model"]["tokenizer"]["image_size"]
                if "pre-training" in what
                else params["image"]["model"]["tokenizer"]["image_size"]
            )
            step = make_step(
                model,
                params,
                batch,
                amp=True,
                image_size=size,
                num_classes=getattr(model.config, "num_classes", CLASSES),
            )
            t = timed_blocks({what: step}, blocks, steps, sync=torch.cuda.synchronize)[what]
            rows[what] = {
                "s_per_step": ci(t),
                "images_per_s": batch / (sum(t) / len(t)),
                "parameters": count_parameters(model),
            }
        except Exception as e:  # out of memory, say: the row says so and the others still run
            rows[what] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(what, rows[what].get("images_per_s", rows[what].get("error")), flush=True)
        model = step = None
        torch.cuda.empty_cache()
    return {"batch": batch, "amp": "bf16", "blocks": blocks, "steps_per_block": steps, "rows": rows}


def part_memory(params: dict) -> dict:
    batch = params["image"]["train"]["batch_size"]
    out = {"batch": batch, "amp": "bf16"}
    for modules in (256, 1024):
        torch.cuda.empty_cache()
        model = paper_model(params, "nac-scale_free", n_processor=modules)
        step = make_step(model, params, batch, amp=True)
        step()  # optimizer state allocated
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        out[f"modules_{modules}"] = {
            "parameters": count_parameters(model),
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
            "resident_before_step_gib": before / 2**30,
        }
        del model, step
    return out


def part_throughput(params: dict, blocks: int, batches: list[int], fractions=(0.0, 0.875)) -> dict:
    return {f"batch_{b}": pruned_throughput(params, blocks, b, fractions) for b in batches}


def part_profile(params: dict, out_dir: Path) -> dict:
    """``torch.profiler`` tables (top operators by CUDA and by CPU time) of three bf16 training
    steps of the paper-size NAC and Perceiver IO, written beside the results file."""
    from torch.profiler import ProfilerActivity, profile

    batch = params["image"]["train"]["batch_size"]
    res = {}
    for run in ("nac-scale_free", "perceiver_io"):
        step = make_step(paper_model(params, run), params, batch, amp=True)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        ka = prof.key_averages()
        path = out_dir / f"profile_{run}.txt"
        path.write_text(
            ka.table(sort_by="cuda_time_total", row_limit=40)
            + "\n\n"
            + ka.table(sort_by="cpu_time_total", row_limit=40)
            + "\n"
        )
        res[run] = str(path)
    model = paper_model(params, "nac-scale_free").cuda().eval()
    x, _ = inputs(256, params["image"]["model"]["tokenizer"]["image_size"], "cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                model(x)
            torch.cuda.synchronize()
    path = out_dir / "profile_nac_eval_batch256.txt"
    path.write_text(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40) + "\n")
    res["nac_eval"] = str(path)
    return res


def _ddp_worker(rank: int, world_size: int, backend: str, port: int, params: dict, batch: int, steps: int, result):
    import torch.distributed as dist

    from nac.training.config import TrainConfig
    from nac.training.distributed import World
    from nac.training.loop import fit

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    model = paper_model(params, "nac-scale_free")
    tr = dict(
        params["image"]["train"],
        epochs=1,
        batch_size=batch,
        warmup_epochs=0,
        augment=False,
        num_workers=0,
        ema=None,
        device="cuda",
    )
    tr.pop("lr_batch_scaling", None)
    cfg = TrainConfig.from_dict(tr)
    data = Synthetic(batch * steps, params["image"]["model"]["tokenizer"]["image_size"])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fit(model, data, None, cfg, world=World(rank, world_size, device), progress=False, desc=f"ddp rank {rank}")
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    flat = torch.cat([p.detach().float().flatten() for p in model.parameters()])
    other = flat.clone()
    dist.broadcast(other, src=0)
    if rank == 0:
        result.update(
            backend=backend,
            world_size=world_size,
            gpus=torch.cuda.device_count(),
            global_batch=batch,
            steps=steps,
            s_per_step_incl_first=wall / steps,
            train_loss=out["final"]["train_loss"],
        )
    else:  # rank 1 against rank 0's broadcast weights
        result["max_abs_weight_diff_between_ranks"] = (flat - other).abs().max().item()
    dist.destroy_process_group()


def part_ddp(params: dict, batch: int = 16, steps: int = 4) -> dict:
    import torch.multiprocessing as mp

    backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    with mp.Manager() as manager:
        result = manager.dict()
        mp.spawn(_ddp_worker, args=(2, backend, 29511, params, batch, steps, result), nprocs=2, join=True)
        res = dict(result)
    res["ranks_identical"] = res["max_abs_weight_diff_between_ranks"] == 0.0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="*", default=["step", "memory", "throughput", "ddp"])
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--eval-batch", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--out", default="bench/results/gpu.json")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit(
            "bench_gpu.py needs a CUDA device (none is visible); the CPU benchmarks are bench_paper.py and "
            "bench_throughput.py"
        )
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    params = compose(["profile=paper"])
    res = {
        "machine": {
            "gpu": torch.cuda.get_device_name(),
            "gpus": torch.cuda.device_count(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "platform": platform.platform(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
        "model": "composed paper params, image.model (Tiny-ImageNet, 64 px, ConvNeXt 3/3/9, 256 modules), "
        "untrained weights",
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for part in a.parts:
        t0 = time.perf_counter()
        try:
            if part == "step":
                res[part] = part_step(params, a.blocks, a.steps)
            elif part == "memory":
                res[part] = part_memory(params)
            elif part == "throughput":
                res[part] = part_throughput(params, a.blocks, a.eval_batch)
            elif part == "ladder":
                res[part] = part_ladder(params, 3, a.steps)
            elif part == "compiled":
                res[part] = part_step(params, a.blocks, a.steps, modes=("bf16_compiled",))
            elif part == "profile":
                res[part] = part_profile(params, out.parent)
            elif part == "ddp":
                res[part] = part_ddp(params)
            else:
                raise SystemExit(
                    f"unknown part {part!r}; choose from step ladder compiled memory throughput profile ddp"
                )
        except Exception as e:  # one part failing (out of memory, say) still leaves the others' numbers
            import traceback

            traceback.print_exc()
            res[part] = {"error": f"{type(e).__name__}: {e}"}
        res[part]["wall_s"] = time.perf_counter() - t0
        print(part, json.dumps(res[part], indent=1, default=str), flush=True)
        out.write_text(json.dumps(res, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
