"""What the `paper` profile costs in GPU-hours, estimated from counted FLOPs and a FLOP rate
(assumed, or measured by bench/bench_gpu.py). For every image-track model of the composed `paper` params (each Table 1
rung) and the few-shot ImageNet pre-trainings, one training step (forward + backward) at batch 2
is run on the CPU under ``torch.utils.flop_counter.FlopCounterMode``; the FLOPs per training
sample, times the training-set size, the epochs and the seeds, give the training FLOPs, and

    GPU-hours = FLOPs / (sustained FLOP/s) / 3600

at an assumed sustained rate (``--tflops``, default 100 TFLOP/s: about 10% of an H100's dense
bf16 peak, typical for models of this size with attention over 256-1024 modules). The step time on
this CPU is measured too and printed beside it. Evaluation, data loading and the tracks (Tables 2
and 3, NLVR: a few percent of the total at their sizes) are not counted.

With ``--measured bench/results/gpu.json`` (written by bench/bench_gpu.py on a GPU) a second
estimate uses the FLOP rate actually achieved by a measured bf16 training step at batch 128:
each model's own where bench_gpu.py's ``ladder`` part timed it, else Perceiver IO's for the
Perceiver IO rows and the Tiny-ImageNet NAC's for every other row. ``--reuse`` takes the FLOP counts from
the existing ``--out`` file instead of counting again.

    python bench/bench_paper_cost.py [--tflops 100] [--measured bench/results/gpu.json] [--reuse]
                                     [--out bench/results/paper_cost.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nac.bench.models import PRETRAIN_CLASSES, pretrain_model
from nac.pipeline.params import compose
from nac.registry import build_model, count_parameters
from nac.tracks.image import image_model_config

TRAIN_SIZES = {"tiny_imagenet": 100_000, "imagenet": 1_281_167}  # training images (docs/reference.md)
CLASSES = PRETRAIN_CLASSES  # classes per dataset
BATCH = 2


def step_flops(model: torch.nn.Module, image_size: int, num_classes: int) -> tuple[float, float]:
    """(FLOPs per training sample of one forward + backward, CPU seconds of that step at BATCH)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (BATCH, 3, image_size, image_size), dtype=torch.uint8, generator=g)
    y = torch.randint(0, num_classes, (BATCH,), generator=g)
    model.train()
    with FlopCounterMode(display=False) as counter:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    t = time.process_time()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return counter.get_total_flops() / BATCH, time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tflops", type=float, default=100.0, help="assumed sustained TFLOP/s of one GPU")
    ap.add_argument("--out", default="bench/results/paper_cost.json")
    ap.add_argument("--measured", help="bench/bench_gpu.py's results: add the measured-rate estimate")
    ap.add_argument("--reuse", action="store_true", help="FLOP counts from the existing --out file")
    args = ap.parse_args()
    if args.reuse:
        rows = json.loads(Path(args.out).read_text())["rows"]
    else:
        rows = count_rows()
    finish(rows, args)


def measured_rates(gpu_json: Path, rows: list[dict]) -> dict:
    """Achieved FLOP/s of bench_gpu.py's bf16 steps: {'perceiver_io': .., 'nac': ..} from its
    ``step`` part, and per row (``rows``' ``what``) from its ``ladder`` part where it ran."""
    res = json.loads(Path(gpu_json).read_text())
    flops = {r["what"]: r["gflops_per_sample"] * 1e9 for r in rows}
    ips = res["step"]["bf16"]["images_per_s"]
    rates = {
        "perceiver_io": flops["Table 1: perceiver_io"] * ips["perceiver_io"],
        "nac": flops["Table 1: nac-scale_free"] * ips["nac-scale_free"],
    }
    for what, m in (res.get("ladder") or {}).get("rows", {}).items():
        if what in flops and "images_per_s" in m:
            rates[what] = flops[what] * m["images_per_s"]
    return rates


def count_rows() -> list[dict]:
    torch.set_num_threads(1)
    p = compose(["profile=paper"])
    image, seeds = p["image"], len(p["seeds"])
    size = image["model"]["tokenizer"]["image_size"]
    rows = []
    for run in image["ladder"]:
        model = build_model(image_model_config(p, run, 0, CLASSES[image["dataset"]]), fit_signatures=False)
        flops, cpu_s = step_flops(model, size, CLASSES[image["dataset"]])
        epochs = image["train"]["epochs"]
        total = flops * TRAIN_SIZES[image["dataset"]] * epochs * seeds
        rows.append(
            {
                "what": f"Table 1: {run}",
                "parameters": count_parameters(model),
                "gflops_per_sample": flops / 1e9,
                "cpu_s_per_step_batch2": cpu_s,
                "epochs": epochs,
                "runs": seeds,
                "train_flops": total,
            }
        )
        print(
            f"{run:28s} {flops / 1e9:8.2f} GFLOP/sample  cpu {cpu_s:5.2f} s/step  {total / 1e18:8.1f} EFLOP", flush=True
        )
    pre = (p.get("fewshot") or {}).get("pretrain")
    if pre:
        tok = pre["model"]["tokenizer"]
        for name in ("nac", "perceiver_io"):
            model = pretrain_model(p, name, fit_signatures=False)
            flops, cpu_s = step_flops(model, tok["image_size"], CLASSES[pre["dataset"]])
            epochs = pre["train"]["epochs"]
            total = flops * TRAIN_SIZES[pre["dataset"]] * epochs
            rows.append(
                {
                    "what": f"Figure 4 pre-training: {name}",
                    "parameters": count_parameters(model),
                    "gflops_per_sample": flops / 1e9,
                    "cpu_s_per_step_batch2": cpu_s,
                    "epochs": epochs,
                    "runs": 1,
                    "train_flops": total,
                }
            )
            print(
                f"pretrain {name:19s} {flops / 1e9:8.2f} GFLOP/sample  "
                f"cpu {cpu_s:5.2f} s/step  {total / 1e18:8.1f} EFLOP",
                flush=True,
            )
    return rows


def finish(rows: list[dict], args) -> None:
    rate = args.tflops * 1e12
    for r in rows:
        r["gpu_hours"] = r["train_flops"] / rate / 3600
    total_h = sum(r["gpu_hours"] for r in rows)
    measured = None
    if args.measured:
        rates = measured_rates(Path(args.measured), rows)
        for r in rows:
            key = r["what"] if r["what"] in rates else "perceiver_io" if r["what"].endswith("perceiver_io") else "nac"
            r["measured_rate_source"] = "this model's measured step" if key == r["what"] else f"the {key} step's rate"
            r["measured_rate_tflops"] = rates[key] / 1e12
            r["gpu_hours_measured_rate"] = r["train_flops"] / rates[key] / 3600
        gpu = json.loads(Path(args.measured).read_text())["machine"]["gpu"]
        measured = {
            "gpu": gpu,
            "source": args.measured,
            "total_gpu_hours": sum(r["gpu_hours_measured_rate"] for r in rows),
            "table1_gpu_hours": sum(r["gpu_hours_measured_rate"] for r in rows if r["what"].startswith("Table 1")),
            "pretrain_gpu_hours": sum(r["gpu_hours_measured_rate"] for r in rows if r["what"].startswith("Figure 4")),
            "rates_tflops": {k: v / 1e12 for k, v in rates.items()},
        }
        print(
            f"at the measured bf16 rates on {gpu} (per model where measured; else NAC {rates['nac'] / 1e12:.1f}, "
            f"Perceiver IO {rates['perceiver_io'] / 1e12:.1f} TFLOP/s): {measured['total_gpu_hours']:,.0f} GPU-hours "
            f"(Table 1 {measured['table1_gpu_hours']:,.0f}, pre-training {measured['pretrain_gpu_hours']:,.0f})"
        )
    print(
        f"\nestimated at {args.tflops:g} TFLOP/s sustained: {total_h:,.0f} GPU-hours "
        f"(Table 1 {sum(r['gpu_hours'] for r in rows if r['what'].startswith('Table 1')):,.0f}, "
        f"pre-training {sum(r['gpu_hours'] for r in rows if r['what'].startswith('Figure 4')):,.0f})"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "assumed_tflops": args.tflops,
                "total_gpu_hours": total_h,
                "measured": measured,
                "rows": rows,
                "machine": {"platform": platform.platform(), "torch": torch.__version__, "threads": 1},
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
