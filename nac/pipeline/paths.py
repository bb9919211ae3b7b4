"""Names of runs and where their files live, for every track: checkpoints under a ``models``
root, metrics under a ``metrics`` root, both arguments (dvc.yaml hands them to each stage,
``--models models --metrics metrics``; the defaults are those folders of the working
directory). Imports no track, so a stage that only reads a checkpoint (the report, few-shot
adaptation, the notebooks) does not depend on the code that trains it.

An image-track *run* is a ladder entry: ``perceiver_io``, ``modfc``, ``frozen_graph``, a
baseline, ``nac-<prior>``, or a control of a NAC, ``nac-<prior>-noreg`` (the graph regularizer
off) or ``nac-<prior>-randinit`` (random instead of prior-fitted initial signatures); with a seed
it names one trained model, ``<run>-<seed>``.
"""

from __future__ import annotations

from pathlib import Path

from nac.config import VARIANTS
from nac.graphs import PRIORS
from nac.pipeline.schema import ParamsError
from nac.registry import BASELINES

PLAIN_RUNS = tuple(v for v in VARIANTS if v != "nac") + tuple(BASELINES)
CONTROLS = {
    "noreg": "the NAC with the graph regularizer off",
    "randinit": "the NAC from random instead of prior-fitted signatures",
}


def parse_run(run: str) -> tuple[str, str | None, str | None]:
    """``"nac-ring_of_cliques"`` -> ``("nac", "ring_of_cliques", None)``;
    ``"nac-scale_free-noreg"`` -> ``("nac", "scale_free", "noreg")``; ``"modfc"`` -> ``("modfc", None, None)``."""
    if run in PLAIN_RUNS:
        return run, None, None
    parts = run.split("-")
    if len(parts) in (2, 3) and parts[0] == "nac" and parts[1] in PRIORS and (len(parts) == 2 or parts[2] in CONTROLS):
        return "nac", parts[1], (parts[2] if len(parts) == 3 else None)
    raise ParamsError(
        f"unknown run {run!r}; valid: {', '.join(PLAIN_RUNS)}, nac-<prior> or nac-<prior>-<control> "
        f"with prior in {', '.join(PRIORS)} and control in {', '.join(CONTROLS)}"
    )


FEWSHOT_BASELINES = ("neural_interpreter", "modular_network")  # few-shot runs = image-track runs of that name


def fewshot_image_run(prior: dict, run: str) -> str:
    """The image-track run a few-shot run adapts: ``nac`` -> ``nac-<prior.name>`` (``prior``: that
    section of params.yaml); Perceiver IO and the baselines keep their names."""
    return run if run in ("perceiver_io", *FEWSHOT_BASELINES) else f"nac-{prior['name']}"


def run_file(run: str, seed: int, suffix: str = ".json") -> str:
    """``<run>-<seed><suffix>``: the name of one trained model's metrics file (and checkpoint, ``.pt``)."""
    return f"{run}-{int(seed)}{suffix}"


MODELS = Path("models")  # the checkpoints' root unless a stage is given another (``--models``)


def image_checkpoint(run: str, seed: int, models: str | Path = MODELS) -> Path:
    return Path(models) / "image" / f"{run}-{seed}.pt"


def track_checkpoint(track: str, run: str, seed: int, models: str | Path = MODELS) -> Path:
    return Path(models) / track / f"{run}-{seed}.pt"


def track_metrics(track: str, run: str, seed: int, root: str | Path = "metrics") -> Path:
    return Path(root) / "tracks" / track / f"{run}-{seed}.json"


def pretrain_dir(models: str | Path = MODELS) -> Path:
    """The few-shot source models pre-trained by the ``pretrain`` stage (``fewshot.source: pretrain``)."""
    return Path(models) / "fewshot_pretrain"


def pretrain_checkpoint(run: str, seed: int, models: str | Path = MODELS) -> Path:
    return pretrain_dir(models) / f"{run}-{seed}.pt"


_ROOTS = {
    "models": "the checkpoints' root (dvc.yaml passes models; its persistent outs are under it)",
    "metrics": "the metrics root (dvc.yaml passes metrics; its outs are under it)",
}


def add_root_arguments(ap, *roots: str) -> None:
    """``--models`` / ``--metrics`` on a stage's argument parser (``roots``: which), each defaulting
    to the folder of that name: the roots dvc.yaml hands a stage, which it hands to the library."""
    for root in roots:
        ap.add_argument(f"--{root}", default=root, help=_ROOTS[root])


PAPER_THROUGHPUT = Path("costs") / "throughput.json"  # under the metrics root


def paper_throughput(metrics: str | Path = "metrics") -> Path:
    """Figure 5b at the paper's size, the ``throughput`` stage's timings (``nac.bench.throughput``)."""
    return Path(metrics) / PAPER_THROUGHPUT
