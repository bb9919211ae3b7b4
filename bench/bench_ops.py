"""Benchmark (not a test; CPU only) of what a GPU would have to do (issue 21, item 3): aten ops
and host syncs per steady-state training step, by part, on the code paths CUDA takes, kept under a
label per code change (the history in ``bench/results/ops.json`` and ``ops.md``). The ``costs``
DVC stage counts the committed code's eager step the same way into ``metrics/costs/ops.json``,
which the report reads; this script adds the compiled column (minutes of inductor per model on
a CPU) and the switches below.

The step is ``nac.training.loop.fit`` itself (the data loader, the checks, the EMA and the
metrics included), run for 2 and for 3 steps of one epoch from the same model; the difference is
exactly one steady-state step (``nac.bench.step_ops.measure``). Models: the paper profile's
Tiny-ImageNet pair (``image.ladder``'s ``perceiver_io`` and ``nac-scale_free``, 64 px) and the
ImageNet pre-training pair (``conf/pretrain/imagenet.yaml``, 224 px), at batch ``--batch`` (ops
per step do not depend on it), with the paper's image training settings (EMA, no clipping) but
no augmentation (``--augment``: the batch's augmentation, the "augment" part), in fp32 (CUDA's
bf16 autocast adds casts to both models alike). How ops and syncs are counted, and why copies to
the host are patched rather than seen by the dispatch mode: ``nac/bench/opcount.py``.

    python bench/bench_ops.py [--batch 2] [--pairs tiny imagenet mini] [--adamw foreach|fused]
                              [--modulation batched|per_layer] [--augment false|true|authors_tinyimagenet]
                              [--label after]

Writes ``ops.json`` (every label kept: run it before and after a change) and ``ops.md``.
``--modulation per_layer`` times the ModFCs' per-layer form, a reference form
(``nac/testing/reference_forms.py``): only that switch imports ``nac.testing``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import torch

from nac.bench.step_ops import compiled_counts, measure, pairs

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
"after_kernel_regularizer": "after" plus every propagator's P from one cosine distance by one
batched set of ops (``NAC.graph.kernel_probabilities``; the signatures normalised once), P computed in
the training objective and passed to the executor and the regularizer, and the regularizer's
matching on a worker thread while the forward runs (``Objective.match_async``: P copied to pinned host
memory without blocking on CUDA, the target read from a host copy made once, the permutation
copied back non-blocking): no host sync left in the NAC's step. The matching's numpy and scipy
work is off the step's thread and not counted (it still costs host time, in parallel).
"after_batched_kernel": "after_loop_kernel" plus every propagator's kernel drawn by one draw
``[L, B, U, V]`` and every ``log K_hat`` computed by one chain of ops on CUDA's path
(``NAC.graph._layer_samplers``: ``KernelSampler(layers=True)``, ``layer_kernel_biases``; the CPU keeps
its sparse per-layer shortcut), and every layer's regularizer term by one chain
(``layer_losses_from_permutations``; the permutations stacked on the host and copied once): the
kernel part 744 -> 301 ops at the Tiny size (the batched draw's ``stack``/``unbind`` now counted
there, "model (other)" 4 -> 0), the regularizer 152 -> 56. Counted as the labels before it (``--sdpa
cpu``). "after_batched_kernel_fused_sdpa": the same code counted with ``--sdpa fused`` (the default
since): SDPA with a bias, the NAC's attention, counted as the one fused kernel CUDA launches each
way (memory-efficient attention, which takes a bias with a gradient) instead of the ~40 ops of the
CPU's math path; Perceiver IO's SDPA (no bias) was one op each way already.
The NAC/PIO ops goal (<= 1.3) is not reached eagerly: what is left is mostly the ModFCs' own ops
(the modulation's product in every ModFC, forward and backward: propagators, read-in and read-out),
the optimizer's and AccumulateGrad's per-parameter ops (the NAC has more parameter tensors) and the
read-out's kernel. Compiled as one whole step (``train.compile_scope: step`` until issue 32, label
``after_whole_step``, "Compiled step" below) it was 1.15 at the Tiny size and 1.19 at the ImageNet
size; the scope's present form (the update compiled apart): label ``after_compiled_update``.
"""
# the counter since the loop's labels (bench/results/ops_loop.md); appended to NOTES in the .md
NOTES_COUNTING = """
Counting since the labels of bench/results/ops_loop.json ("main_loop_*": main's loop at bbb967b,
"loop_*": the loop of branch h-loop): host tensors are tracked (the CPU generator's draws and what is
computed from them), so a blocking copy of them to the device counts (``augment: true``'s flips on
main); a copy between host and device is one ``_to_copy`` op, as on CUDA (+2 "loop" ops per step:
the inputs and the labels). ``--augment``: the batch augmentation ("augment" part; the recipe's
per-image transforms run in the data pipeline on the host). ``augment: true`` per step: 394 ops at
batch 128 on main (a slice per image), 25 at any batch now (two gathers).
"""

NOTES_COMPILED = """What the compiled column counts (``--compiled``): the step with ``train.compile: default``
(inductor), compiled on the CPU with the code paths CUDA takes, 3 steps from the same model.
"compiled region": the kernels one run of the region launches, read from inductor's output code
of the forward graph and of the backward graph: generated kernels (``cpp_fused_*`` on the CPU;
Triton kernels on CUDA, whose fusion boundaries can differ, so this is an estimate of their
number) plus extern calls (matrix products, convolutions, SDPA, the drop-path draws: the same
library calls on CUDA). "eager outside the region": the eager count's ops of the parts the
compiled step leaves eager (``EAGER_PARTS``: loader, gradient norm, optimizer, checks, EMA, the
loop, "backward (other)" = AccumulateGrad's ``detach`` per parameter, host-only), and for the
NAC the matching in advance (``Objective.matching_in_advance``: ``P`` without gradient, the
permutations' copies). "graphs", "graph breaks", "recompiles": dynamo's counters over the 3
steps (``unique_graphs``, ``graph_break``; recompiles = graphs after step 3 - after step 1).

Scope "step" (``--compile-scope step``, ``train.compile_scope: step``): the update is compiled too
(``nac.training.optim.clip_and_step``: the gradients' norm, clipping and ``optimizer.step()``,
torch's compiled optimizer with a tensor LR and foreach AdamW, CUDA's form): two more output
modules, "clip" and "adamw"; eager outside: loader, checks, EMA, the loop, AccumulateGrad
(``EAGER_PARTS_STEP``) and the matching in advance. Until issue 32 (labels ``whole_step_cpu_sdpa``
and ``after_whole_step``) the scope was a second step function, ``whole_step`` (forward, loss,
gradients by a traced ``torch.autograd.grad``, clipping, torch's functional AdamW on the
optimizer's state and the next step's ``P``, one graph; its column "step kernels + extern"). Labels from
``after_whole_step`` on count SDPA with a float bias in the region as CUDA's fused kernel, one
extern call each way (``nac.bench.sdpa_counting.compiled_fused_sdpa``, the eager column's ``--sdpa fused``
convention): inductor on the CPU decomposes it (matrix products and softmax, forward and
backward: +~60 launches at the ImageNet size, what ``whole_step_cpu_sdpa`` and the
``after_batched_kernel_fused_sdpa`` compiled rows count); Perceiver IO's SDPA has no bias and is
one call either way.
"""


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


# the compiled region's graphs, in the order inductor compiles them (compiled_counts)
PARTS = ("forward", "backward", "clip", "adamw")


def compiled_table(results: dict) -> str:
    """The compiled column of every label that has one."""
    lines = [
        "| label | pair | model | scope | eager ops/step | compiled launches/step | NAC/PIO (compiled) | compiled "
        "region: kernels + extern of the forward, backward (scope step: clipping, AdamW; "
        "until issue 32 the one graph's) | eager outside "
        "the region | graphs | graph breaks | recompiles |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, res in results.items():
        if label == "machine":
            continue
        for pair, models in res.items():
            pio = next((v for k, v in models.items() if k.startswith("perceiver")), None)
            for name, r in models.items():
                c = r.get("compiled")
                if c is None:
                    continue
                pc = (pio or {}).get("compiled")
                ratio = f"{c['launches_total'] / pc['launches_total']:.2f}" if pc and r is not pio else ""
                g = c["region"]
                parts = ("step",) if "step kernels" in g else [p for p in PARTS if f"{p} kernels" in g]
                region = ", ".join(f"{g[f'{p} kernels']} + {g[f'{p} extern']}" for p in parts)
                lines.append(
                    f"| {label} | {pair} | {name} | {c.get('scope', 'forward')} | {r['ops_total']} | "
                    f"{c['launches_total']} | {ratio} | {region} | "
                    + ", ".join(f"{p} {n}" for p, n in c["eager"].items())
                    + f" | {c['graphs']} | {c['graph_breaks']} | {c['recompiles']} |"
                )
    return "\n".join(lines) if len(lines) > 2 else ""


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
        help="the ModFCs' code modulation (per_layer: the form before issue 21, nac/testing/reference_forms.py)",
    )
    ap.add_argument(
        "--augment",
        choices=["false", "true", "authors_tinyimagenet"],
        default="false",
        help="train.augment in the counted step (the data pipeline's transforms run on the host)",
    )
    ap.add_argument(
        "--sdpa",
        choices=["fused", "cpu"],
        default="fused",
        help="SDPA with a bias counted as CUDA's fused kernel (1 op each way) or as the CPU's math path runs it",
    )
    ap.add_argument(
        "--compiled",
        nargs="*",
        default=[],
        choices=["tiny", "imagenet", "mini"],
        help="the pairs that also get the compiled column (train.compile: default, inductor on the CPU)",
    )
    ap.add_argument(
        "--compile-scope",
        choices=["forward", "step"],
        default="forward",
        help="the compiled column's train.compile_scope (step: the update compiled too, clip_and_step)",
    )
    ap.add_argument("--out", default="bench/results/ops.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(a.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    prepare = None
    if a.modulation == "per_layer":  # NAC.code_modulations' reference form
        from nac.testing.reference_forms import per_layer_modulation as prepare
    res = {}
    for pair, (models, size, classes, train) in pairs(a.pairs).items():
        res[pair] = {}
        for name, model in models.items():
            augment = {"false": False, "true": True}.get(a.augment, a.augment)
            res[pair][name] = measure(
                model, a.batch, size, classes, train, adamw=a.adamw, augment=augment, sdpa=a.sdpa, prepare=prepare
            )
            print(pair, name, res[pair][name]["ops_total"], "ops", res[pair][name]["syncs_total"], "syncs", flush=True)
            if pair in a.compiled:
                res[pair][name]["compiled"] = compiled_counts(
                    model, a.batch, size, classes, train, res[pair][name], scope=a.compile_scope, sdpa=a.sdpa
                )
                print(pair, name, "compiled", res[pair][name]["compiled"], flush=True)
    results[a.label] = {**results.get(a.label, {}), **res}
    results.setdefault("machine", {})[a.label] = {
        "torch": torch.__version__,
        "batch": a.batch,
        "adamw": a.adamw,
        "modulation": a.modulation,
        "augment": a.augment,
        "sdpa": a.sdpa,
        "compiled": a.compiled,
        "compile_scope": a.compile_scope,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(render(results))
    print(table(results))


def render(results: dict) -> str:
    """``ops.md``: the eager table, its notes, and the compiled table where a label has one."""
    return (
        "# Aten ops and host syncs per steady-state training step (bench/bench_ops.py)\n\n"
        "CUDA's code paths taken on the CPU, fp32, paper-profile sizes (the `mini` pair: mini's image models); "
        "one step = fit(3 steps) - fit(2 steps).\n\n"
        + table(results)
        + "\n\n"
        + NOTES
        + NOTES_COUNTING
        + (
            "\n## Compiled step (train.compile: default)\n\n" + compiled_table(results) + "\n\n" + NOTES_COMPILED
            if compiled_table(results)
            else ""
        )
    )


if __name__ == "__main__":
    main()
