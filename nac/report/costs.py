"""The report's cost section: what a NAC training step costs against Perceiver IO's on a GPU's
code paths, from the benchmarks' committed results (never measured by the report itself).

* ``bench/results/ops.json`` (``python bench/bench_ops.py``): aten ops (kernel launches on CUDA)
  and host syncs per steady-state training step, eager and with ``train.compile``, counted on the
  CPU along the code paths CUDA takes; the newest label that has both pairs is read.
* ``bench/results/gpu.json`` (``python bench/bench_gpu.py``, on a GPU): the measured bf16 step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

OPS = Path("bench/results/ops.json")
GPU = Path("bench/results/gpu.json")
PAIRS = {"tiny": "Tiny-ImageNet (256 modules, 64 px)", "imagenet": "ImageNet pre-training (640 modules)"}


def _newest_label(ops: dict) -> str | None:
    """The last label (the file keeps them in the order they were measured) with every pair."""
    labels = [k for k, v in ops.items() if isinstance(v, dict) and all(p in v for p in PAIRS)]
    return labels[-1] if labels else None


def step_ops_table(ops: dict) -> tuple[str | None, pd.DataFrame | None]:
    """``(label, table)``: per pair, Perceiver IO's and the NAC's ops and host syncs per step and
    their ratio, eager and compiled (launches, graphs, graph breaks) where the label has them."""
    label = _newest_label(ops)
    if label is None:
        return None, None
    rows = []
    for pair, name in PAIRS.items():
        runs = ops[label][pair]
        pio = runs["perceiver_io"]
        nac_key = next(k for k in runs if k.startswith("nac"))
        nac = runs[nac_key]
        row = {
            "step": name,
            "eager ops: Perceiver IO": pio["ops_total"],
            "eager ops: NAC": nac["ops_total"],
            "NAC / PIO": round(nac["ops_total"] / pio["ops_total"], 2),
            "host syncs (PIO, NAC)": f"{pio['syncs_total']}, {nac['syncs_total']}",
        }
        if "compiled" in pio and "compiled" in nac:
            pc, nc = pio["compiled"], nac["compiled"]
            row |= {
                "compiled launches: PIO": pc["launches_total"],
                "compiled launches: NAC": nc["launches_total"],
                "compiled NAC / PIO": round(nc["launches_total"] / pc["launches_total"], 2),
                "NAC graphs (breaks, recompiles)": f"{nc['graphs']} ({nc['graph_breaks']}, {nc['recompiles']})",
            }
        rows.append(row)
    return label, pd.DataFrame(rows)


def gpu_step_line(gpu: dict) -> str:
    """One sentence: the measured bf16 step of both models on the GPU, with its CI and date."""
    step, machine = gpu["step"], gpu["machine"]
    bf16 = step["bf16"]
    pio, nac, ratio = bf16["perceiver_io_s_per_step"], bf16["nac-scale_free_s_per_step"], bf16["nac_over_pio"]
    return (
        f"Measured on {machine['gpu']} ({machine['date'][:10]}, torch {machine['torch']}), bf16, batch "
        f"{step['batch']}, Tiny-ImageNet size: Perceiver IO {1e3 * pio['mean']:.0f} ms, NAC "
        f"{1e3 * nac['mean']:.0f} ms per step; NAC / PIO {ratio['mean']:.2f} [{ratio['lo']:.2f}, {ratio['hi']:.2f}] "
        f"(95% CI over {ratio['n']} blocks)."
    )


def cost_section() -> dict:
    """What the template's cost section shows: ``label`` and ``table`` (Markdown) from
    ``OPS``, ``gpu`` (a sentence) from ``GPU``; ``None`` where a file is absent."""
    label, table = step_ops_table(json.loads(OPS.read_text(encoding="utf-8"))) if OPS.exists() else (None, None)
    return {
        "ops_file": str(OPS),
        "gpu_file": str(GPU),
        "label": label,
        "table": None if table is None else table.to_markdown(index=False),
        "gpu": gpu_step_line(json.loads(GPU.read_text(encoding="utf-8"))) if GPU.exists() else None,
    }


__all__ = ["cost_section", "gpu_step_line", "step_ops_table"]
