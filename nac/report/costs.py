"""The report's cost section: what a NAC training step costs against Perceiver IO's on a GPU's
code paths.

* ``metrics/costs/ops.json`` (the ``costs`` stage, ``dvc repro``): aten ops (kernel launches on
  CUDA) and host syncs per steady-state training step, eager, counted on the CPU along the code
  paths CUDA takes, with this code.
* ``bench/results/ops.json`` (``python bench/bench_ops.py --compiled tiny imagenet``, a committed
  benchmark with its date and torch): the compiled step's launches, from the newest label that has
  them for both pairs; its own eager counts say whether the code has changed since (the table
  names the label and flags it).
* ``bench/results/gpu.json`` (``python bench/bench_gpu.py``, on a GPU): the measured bf16 step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

# relative to the repository folder the section is given (and printed so, in the report)
OPS = Path("metrics/costs/ops.json")
COMPILED = Path("bench/results/ops.json")
GPU = Path("bench/results/gpu.json")
PAIRS = {"tiny": "Tiny-ImageNet (256 modules, 64 px)", "imagenet": "ImageNet pre-training (640 modules)"}


def _nac_key(runs: dict) -> str:
    return next(k for k in runs if k.startswith("nac"))


def newest_compiled_label(bench: dict) -> str | None:
    """The last label of the benchmark's file (it keeps them in the order measured) with compiled
    counts of both models of every pair."""
    labels = [
        k
        for k, v in bench.items()
        if isinstance(v, dict) and all(p in v and v[p] and all("compiled" in r for r in v[p].values()) for p in PAIRS)
    ]
    return labels[-1] if labels else None


def step_ops_table(ops: dict, bench: dict | None = None) -> tuple[str | None, pd.DataFrame]:
    """``(compiled label, table)``: per pair, Perceiver IO's and the NAC's eager ops and host syncs
    per step (``ops``, the ``costs`` stage's file) and their ratio; with ``bench`` (the
    benchmark's labelled file), the compiled columns of its newest label that has them, and
    whether that label's eager counts are this code's ("compiled counted on this code": yes, or
    the label's NAC eager count where it differs)."""
    label = newest_compiled_label(bench) if bench else None
    rows = []
    for pair, name in PAIRS.items():
        if pair not in ops["pairs"]:  # costs.pairs: the smoke profile counts the Tiny pair only
            continue
        runs = ops["pairs"][pair]
        pio, nac = runs["perceiver_io"], runs[_nac_key(runs)]
        row = {
            "step": name,
            "eager ops: Perceiver IO": pio["ops_total"],
            "eager ops: NAC": nac["ops_total"],
            "NAC / PIO": round(nac["ops_total"] / pio["ops_total"], 2),
            "host syncs (PIO, NAC)": f"{pio['syncs_total']}, {nac['syncs_total']}",
        }
        if label is not None:
            then = bench[label][pair]
            tp, tn = then["perceiver_io"], then[_nac_key(then)]
            pc, nc = tp["compiled"], tn["compiled"]
            same = (tp["ops_total"], tn["ops_total"]) == (pio["ops_total"], nac["ops_total"])
            row |= {
                "compiled launches: PIO": pc["launches_total"],
                "compiled launches: NAC": nc["launches_total"],
                "compiled NAC / PIO": round(nc["launches_total"] / pc["launches_total"], 2),
                "NAC graphs (breaks, recompiles)": f"{nc['graphs']} ({nc['graph_breaks']}, {nc['recompiles']})",
                "compiled counted on this code": "yes"
                if same
                else f"no (eager ops then: PIO {tp['ops_total']}, NAC {tn['ops_total']})",
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


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def cost_section(root: str | Path) -> dict:
    """What the template's cost section shows: ``table`` (Markdown) from ``OPS`` with the compiled
    columns of ``COMPILED``'s ``label`` (and its date), ``gpu`` (a sentence) from ``GPU``, each
    under the repository folder ``root``; ``None`` where a file is absent."""
    root = Path(root)
    ops, bench, gpu = _read(root / OPS), _read(root / COMPILED), _read(root / GPU)
    label, table = step_ops_table(ops, bench) if ops else (None, None)
    when = ((bench or {}).get("machine") or {}).get(label) or {}
    return {
        "ops_file": str(OPS),
        "compiled_file": str(COMPILED),
        "gpu_file": str(GPU),
        "label": label,
        "label_date": (when.get("date") or "")[:10] or None,
        "label_torch": when.get("torch"),
        "label_scope": when.get("compile_scope") or "forward",  # bench_ops.py's default scope
        "table": None if table is None else table.to_markdown(index=False),
        "gpu": gpu_step_line(gpu) if gpu else None,
    }


__all__ = ["cost_section", "gpu_step_line", "newest_compiled_label", "step_ops_table"]
