"""Train-from-scratch tracks: ``points`` (Table 2), ``listops`` and ``text`` (Table 3) and
``nlvr`` (the conditional NAC and its controls).

Each track is a params section ``{dataset, runs, model, train}``:

- ``points`` / ``listops`` / ``text`` runs: ``perceiver_io`` and ``nac`` (a NAC with the prior of
  the ``prior`` config group; scale-free by default, as in the paper's Table 2).
- ``nlvr`` runs: ``conditional`` (the circuit generator reads the sentence, the executor the
  image pair; no graph prior, as in the paper), ``text_only`` (a NAC reading only the sentence)
  and ``image_only`` (a NAC reading only the image pair). The controls show whether the
  conditional model uses both inputs.

A trained model is ``models/<track>/<run>-<seed>.pt`` (resumed from when interrupted); its
metrics (validation and test accuracy, the majority-class rate of each split, per-epoch history)
are ``metrics/tracks/<track>/<run>-<seed>.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from nac.checkpoint_io import mirror_path
from nac.config import ModelConfig
from nac.evaluation import accuracy_by_group, predict, topk_accuracy
from nac.fields import given
from nac.graphs import _resolve as resolve_prior
from nac.pipeline import schema_models as schema
from nac.pipeline.datasets import builder, dataset_info
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, track_checkpoint, track_metrics
from nac.pipeline.runs import prior_settings, seeded_train_config, start_run, train_config
from nac.pipeline.schema import check_reads
from nac.registry import BASELINES, count_parameters
from nac.training.config import TrainConfig
from nac.training.loop import fit

ParamsError = schema.ParamsError

TRACK_RUNS: dict[str, tuple[str, ...]] = {
    "points": ("perceiver_io", "nac", "neural_interpreter"),
    "listops": ("perceiver_io", "nac", "neural_interpreter"),
    "text": ("perceiver_io", "nac", "neural_interpreter"),
    "nlvr": ("conditional", "text_only", "image_only"),
}
TRACK_TITLES = {
    "points": "Point clouds (Table 2)",
    "listops": "ListOps (Table 3)",
    "text": "Byte-level text (Table 3)",
    "nlvr": "NLVR (conditional NAC)",
}


def _with_vocab(tokenizer: dict[str, Any], info: dict[str, Any], cond: bool = False) -> dict[str, Any]:
    """Fill a sequence tokenizer's ``vocab_size`` / ``max_length`` and a feature tokenizer's
    ``d_feat`` from the dataset's info when the params leave them out."""
    tok = dict(tokenizer)
    if tok.get("kind") == "sequence":
        tok.setdefault("vocab_size", int(info["vocab_size"]))
        shape = info.get("cond_shape" if cond else "input_shape")
        if shape:
            tok.setdefault("max_length", int(shape[-1]))
    elif tok.get("kind") == "features":
        shape = info.get("cond_shape" if cond else "input_shape") or [info.get("feature_dim")]
        tok.setdefault("d_feat", int(shape[-1]))
    return tok


def run_config(sec: schema.Track, track: str, run: str, info: dict[str, Any], *, prior: dict, baselines=None):
    """The model config of one run of a track, from its section's ``model`` and the dataset's info;
    a NAC's prior from the ``prior`` section (``prior_settings``); for ``neural_interpreter``,
    Table 1's Neural Interpreter (``baselines``: the ``image.baselines`` section) reading this
    track's tokens (``<track>.model.tokenizer``)."""
    if run not in TRACK_RUNS[track]:
        raise ParamsError(f"{track}: unknown run {run!r}; valid: {', '.join(TRACK_RUNS[track])}")
    model = given(sec.model)
    cond_tok = model.pop("cond_tokenizer", None)
    ngram = sec.ngram
    if ngram:  # the input tokens are hashed n-gram ids (see hashed_ngrams)
        if model["tokenizer"].get("kind") != "sequence":
            raise ParamsError(f"{track}.ngram needs a sequence tokenizer, got {model['tokenizer'].get('kind')!r}")
        info = dict(info, vocab_size=int(ngram.buckets) + 1)
    if run == "neural_interpreter":  # Table 1's Neural Interpreter (image.baselines) reading the track's tokens
        ni = given(getattr(baselines, run, None))
        ni.update(tokenizer=_with_vocab(model["tokenizer"], info), num_classes=int(info["num_classes"]))
        return BASELINES[run][0].from_dict(ni)
    cfg = dict(model, num_classes=int(info["num_classes"]))
    cfg["tokenizer"] = _with_vocab(model["tokenizer"], info)
    if run == "perceiver_io":
        cfg["variant"] = "perceiver_io"
    elif run == "nac":
        cfg.update(variant="nac", **prior_settings(prior))
    elif run == "conditional":
        if not cond_tok:
            raise ParamsError(f"{track}.model.cond_tokenizer is required for the conditional NAC")
        cfg.update(
            variant="nac",
            generator="conditional",
            cond_tokenizer=_with_vocab(cond_tok, info, cond=True),
            **(prior_settings(prior) if model.get("generator_regularizer") else {}),
        )  # its prior: the `prior` group
    elif run == "text_only":
        if not cond_tok:
            raise ParamsError(f"{track}.model.cond_tokenizer is required for the text-only control")
        cfg.update(variant="nac", tokenizer=_with_vocab(cond_tok, info, cond=True), **prior_settings(prior))
    else:  # image_only
        cfg.update(variant="nac", **prior_settings(prior))
    return ModelConfig.from_dict(cfg)


def track_model_config(params: dict, track: str, run: str, info: dict[str, Any]):
    """``run_config`` of a profile's params (benches, tests, the validator)."""
    baselines = schema.section(params, "image.baselines") if run == "neural_interpreter" else None
    return run_config(schema.section(params, track), track, run, info, prior=params.get("prior"), baselines=baselines)


def track_train_config(params: dict, track: str, seed: int) -> TrainConfig:
    return train_config(params, given(schema.section(params, track).train), seed)


def hashed_ngrams(ids: torch.Tensor, n: int, buckets: int) -> torch.Tensor:
    """Token ids ``[..., L]`` (pad 0 at the end) -> the id of each position's n-gram (the token and
    the ``n - 1`` before it; positions before the start count as 0), hashed into ``1..buckets``;
    padding stays 0. A byte-level tokenizer with local context: the embedding of a byte trigram."""
    x = ids.long()
    h = torch.zeros_like(x)
    for k in range(n):
        shifted = torch.cat([x.new_zeros(*x.shape[:-1], k), x[..., : x.shape[-1] - k]], dim=-1) if k else x
        h = (h * 1_000_003 + shifted) % 2_147_483_647
    return torch.where(x > 0, 1 + h % buckets, torch.zeros_like(h))


class RunInputs(Dataset):
    """A dataset's items as one run reads them: the text-only control reads the sentence as its
    input (``cond`` -> ``input``), the image-only control drops the sentence, the others read
    items unchanged; with ``ngram`` ({n, buckets}) token inputs become hashed n-gram ids.
    Module-level so DataLoader workers can pickle it."""

    def __init__(self, data: Dataset, run: str, ngram: dict[str, int] | None = None):
        self.data, self.run, self.ngram = data, run, ngram

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = dict(self.data[i])
        if self.ngram:
            item["input"] = hashed_ngrams(item["input"], int(self.ngram["n"]), int(self.ngram["buckets"]))
        if self.run == "text_only":
            item["input"] = item.pop("cond")
            item.pop("mask", None)
            if "cond_mask" in item:
                item["mask"] = item.pop("cond_mask")
        elif self.run == "image_only":
            item.pop("cond", None)
            item.pop("cond_mask", None)
        return item


def majority_rate(labels: np.ndarray) -> float:
    """Accuracy (percent) of always predicting the most frequent label: the chance level."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    return float(100.0 * counts.max() / counts.sum())


def evaluate_split(
    model: torch.nn.Module,
    data: Dataset,
    device,
    batch_size: int,
    groups: np.ndarray | None = None,
    group_names: list[str] | None = None,
) -> dict[str, Any]:
    """Acc@1, the split's majority-class rate and size, and Acc@1 per group (reasoning type)."""
    out = predict(model, data, device, batch_size)
    res = {
        "acc1": topk_accuracy(out["logits"], out["label"], 1),
        "chance": majority_rate(out["label"]),
        "n": int(len(out["label"])),
    }
    if groups is not None:
        res["acc1_by_type"] = accuracy_by_group(out["logits"], out["label"], np.asarray(groups), group_names)
    return res


# Relative training cost of a track's runs on mini (rough weights, not a measurement to quote): only
# the order in which ``train_track_jobs`` hands jobs to the workers (longest first), never a result.
_TRACK_COST = {
    "neural_interpreter": 110,
    "conditional": 55,
    "image_only": 39,
    "nac": 25,
    "text_only": 27,
    "perceiver_io": 17,
}


def train_track_jobs(sec: schema.Track, seeds: list[int]) -> list[tuple[str, int]]:
    """A ``train_<track>`` stage's jobs, ``(run, seed)``, longest first (so that the last job to
    finish is a short one)."""
    jobs = [(run, seed) for run in sec.runs for seed in seeds]
    return sorted(jobs, key=lambda j: -_TRACK_COST.get(j[0], 30))


def train_track_run(
    sec: schema.Track,
    run: str,
    seed: int,
    progress: bool = True,
    *,
    track: str,
    data: dict,
    prior: dict,
    baselines=None,
    device: str = "auto",
    metrics: str | Path | None = None,
    models: str | Path = MODELS,
    resume: str | Path | None = None,
) -> dict[str, Any] | None:
    """Train one run of a track (``sec``: its section, ``track`` its name) with one seed, then
    evaluate it on the validation and test splits. ``data``, ``prior``, ``device``: those sections
    of params.yaml, ``baselines`` ``image.baselines`` (``run_config``). Returns the metrics
    (``None`` on non-main processes under torchrun). ``metrics`` (a ``train_<track>`` stage's job,
    ``metrics``): also write the curves under ``<metrics>/tracks/live/<track>/<run>-<seed>`` and
    the metrics to ``<metrics>/tracks/<track>/<run>-<seed>.json`` (``track_metrics``). The
    checkpoint (resumed from, written each epoch) is ``<models>/<track>/<run>-<seed>.pt``
    (``track_checkpoint``)."""
    ds = builder(data, sec.dataset)
    cfg = seeded_train_config(given(sec.train), seed, device)
    ngram = sec.ngram.model_dump() if sec.ngram else None
    train_set = RunInputs(ds.load("train"), run, ngram)
    val = RunInputs(ds.load(sec.val_split), run, ngram)
    model_config = run_config(sec, track, run, ds.info(), prior=prior, baselines=baselines)
    model, world, fingerprint = start_run(data, model_config, cfg, dataset=sec.dataset, source=__name__)
    out = fit(
        model,
        train_set,
        val,
        cfg,
        world=world,
        checkpoint=track_checkpoint(track, run, seed, models),
        mirror=None if resume is None else mirror_path(track_checkpoint(track, run, seed, models), models, resume),
        live_dir=None if metrics is None else f"{metrics}/tracks/live/{track}/{run}-{seed}",
        progress=progress,
        desc=f"{track} {run}-{seed}",
        fingerprint=fingerprint,
    )
    if not world.is_main:
        return None
    res: dict[str, Any] = {
        "track": track,
        "dataset": sec.dataset,
        "run": run,
        "seed": seed,
        "parameters": count_parameters(model),
        "history": out["history"],
    }
    device = world.device
    for split in (sec.val_split, sec.test_split):
        groups, names = reasoning_types(ds, split) if track == "nlvr" else (None, None)
        ev = evaluate_split(model, RunInputs(ds.load(split), run, ngram), device, cfg.eval_batch_size, groups, names)
        key = "val" if split == sec.val_split else "test"
        res.update({f"{key}_{k}": v for k, v in ev.items()})
    if metrics is not None:
        write_json(track_metrics(track, run, seed, root=metrics), res)
    return res


# ---------------------------------------------------------------------------- NLVR reasoning types
REASONING_TYPES = ("hard cardinality", "soft cardinality", "existential", "spatial")
_NUMBER_WORDS = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "single", "pair"}
_SOFT_WORDS = {
    "many",
    "few",
    "more",
    "less",
    "fewer",
    "most",
    "several",
    "multiple",
    "least",
    "some",
    "majority",
    "only",
}
_SPATIAL_WORDS = {
    "left",
    "right",
    "above",
    "below",
    "behind",
    "front",
    "next",
    "beside",
    "near",
    "top",
    "bottom",
    "under",
    "over",
    "between",
    "on",
    "inside",
    "around",
}


def sentence_reasoning_type(sentence: str) -> int:
    """A keyword rule for NLVR2 sentences, which carry no reasoning-type label (the paper's
    Appendix G annotation is not public): spatial words first, then exact numbers, then vague
    quantities, else existential. Returns an index into ``REASONING_TYPES``."""
    words = {w.strip(".,;:!?\"'").lower() for w in sentence.split()}
    if words & _SPATIAL_WORDS:
        return 3
    if words & _NUMBER_WORDS or any(w.isdigit() for w in words):
        return 0
    if words & _SOFT_WORDS:
        return 1
    return 2


def reasoning_types(builder, split: str) -> tuple[np.ndarray, list[str]]:
    """Reasoning type per item of ``split``: stored for ``nlvr_shapes``, by keyword rule for NLVR2."""
    if hasattr(builder, "sentences"):  # nlvr_shapes stores the type it generated
        info = builder.info()
        return np.asarray(builder.arrays(split)["reasoning_type"]), list(info["reasoning_types"])
    records = builder.records(split)
    return np.array([sentence_reasoning_type(r["sentence"]) for r in records]), list(REASONING_TYPES)


def sentences(builder, split: str) -> list[str]:
    if hasattr(builder, "sentences"):
        return builder.sentences(split)
    return [r["sentence"] for r in builder.records(split)]


# ------------------------------------------------------------------------------------ params
def validate(params: dict[str, Any], track: str) -> None:
    """A track's section: ``schema_models.Track``, runs, dataset, models, the fit of the ``prior``
    group's params to the module count of the runs that use it; ``nlvr``'s analysed run and seed."""
    if track not in params:
        return
    sec, seeds = schema.section(params, track), params["seeds"]
    for i, run in enumerate(sec.runs):
        if run not in TRACK_RUNS[track]:
            raise ParamsError(f"{track}.runs[{i}]={run!r}; valid choices: {', '.join(TRACK_RUNS[track])}")
    check_reads(params, track, sec)
    info = dataset_info(params, sec.dataset)
    if info is not None and "num_classes" in info:
        for run in sec.runs:
            try:
                track_model_config(params, track, run, info)
            except (ValueError, KeyError) as e:
                raise ParamsError(f"{track}.model for run {run!r}: {e}") from e
    n, prior = given(sec.model).get("n_processor"), prior_settings(params.get("prior"))
    if isinstance(n, int) and any(r in ("nac", "text_only", "image_only") for r in sec.runs):  # the prior's runs
        try:
            resolve_prior(prior["prior"], n, prior["prior_params"])
        except ValueError as e:
            raise ParamsError(f"prior.params {prior['prior_params']} with {track}.model.n_processor={n}: {e}") from e
    analysis = getattr(sec, "analysis", None)
    if analysis is not None and analysis.run not in sec.runs:
        raise ParamsError(f"nlvr.analysis.run={analysis.run!r} is not trained (nlvr.runs {sec.runs})")
    if analysis is not None and analysis.seed is not None and analysis.seed not in seeds:
        raise ParamsError(f"nlvr.analysis.seed={analysis.seed!r} is not in seeds {seeds}")


def validator(track: str):
    """``validate`` of one track, for ``load_params(check=[validator(track)])``."""
    return lambda params: validate(params, track)
