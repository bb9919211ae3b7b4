"""Schema checks of the model-bearing params sections (tokenizers, models, training, the image
ladder and its baselines, the few-shot protocol, the tracks). Split from ``nac.pipeline.schema``
so that stages which read only data params (download, prepare) do not import the model code.
"""

from __future__ import annotations

import inspect
import typing
from functools import lru_cache
from typing import Annotated, Any

import annotated_types as at

from nac.circuits import tokenizers as T
from nac.config import ModelConfig
from nac.data.registry import _REGISTRY
from nac.fields import NONNEGATIVE_INT
from nac.pipeline.schema import (
    IMAGE_MODEL_SET,
    NGRAM_KEYS,
    NLVR_ANALYSIS_KEYS,
    TRACK_MODEL_SET,
    TRAIN_SET,
    check_batch_fits,
    check_split_read,
)
from nac.pipeline.typecheck import (
    ParamsError,
    check_dataclass,
    check_keys,
    check_table,
    check_type,
    check_unique,
)
from nac.registry import BASELINES
from nac.training.config import TrainConfig


# ------------------------------------------------------------------------------- tokenizers
@lru_cache(maxsize=None)
def _tokenizer_args() -> dict[str, dict[str, Any]]:
    """kind -> {argument: annotation} of the tokenizer's constructor (``image_pair``: {image})."""
    out: dict[str, dict[str, Any]] = {"image_pair": {"image": dict}}
    for kind, fn in (
        ("conv32", getattr(T, "conv32", None)),
        ("convnext", getattr(T, "convnext", None)),
        ("points", getattr(T, "PointTokenizer", None)),
        ("sequence", getattr(T, "SequenceTokenizer", None)),
        ("features", getattr(T, "FeatureTokenizer", None)),
    ):
        if fn is None:
            continue
        target = fn.__init__ if inspect.isclass(fn) else fn
        try:
            hints = typing.get_type_hints(target)
        except Exception:
            hints = {}
        out[kind] = {
            n: hints.get(n, Any)
            for n, p in inspect.signature(target).parameters.items()
            if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
    return out


def check_tokenizer(where: str, tok: Any) -> None:
    if not isinstance(tok, dict):
        raise ParamsError(f"{where} must be a mapping {{kind: ..., ...}}, got {tok!r}")
    kind = tok.get("kind")
    if kind not in T.TOKENIZERS:
        raise ParamsError(f"{where}.kind={kind!r}; valid choices: {', '.join(T.TOKENIZERS)}")
    args = _tokenizer_args().get(kind)
    if args is None:
        return
    check_keys(where, tok, ["kind", *args])
    for key, value in tok.items():
        if key == "kind":
            continue
        tp = args[key]
        if key in ("dim", "pos_dim", "image_size", "width", "vocab_size", "max_length", "d_feat"):
            tp = Annotated[tp, at.Ge(1)]
        if key == "n_freqs":
            tp = Annotated[tp, at.Ge(0)]
        check_type(f"{where}.{key}", value, tp)
    if kind == "image_pair":
        check_tokenizer(f"{where}.image", tok.get("image"))
    size = tok.get("image_size")
    if kind == "conv32" and isinstance(size, int) and size % 4:
        raise ParamsError(f"{where}.image_size={size} must be divisible by 4 (conv32 has two stride-2 convs)")
    if kind == "convnext" and isinstance(size, int) and isinstance(tok.get("depths"), list):
        stride = 4 * 2 ** (len(tok["depths"]) - 1)
        if size % stride:
            raise ParamsError(
                f"{where}.image_size={size} must be divisible by {stride} (the convnext stride with "
                f"{len(tok['depths'])} stages)"
            )


def check_model(where: str, model: Any, set_by: dict[str, str]) -> None:
    check_dataclass(where, model, ModelConfig, set_by)
    for key in ("tokenizer", "cond_tokenizer"):
        if model.get(key) is not None:
            check_tokenizer(f"{where}.{key}", model[key])


def check_train(where: str, train: Any) -> None:
    check_dataclass(where, train, TrainConfig, TRAIN_SET)


def check_image(params: dict) -> None:
    image = check_keys(
        "image",
        params["image"],
        ["dataset", "val_split", "test_split", "ood_dataset", "ood_split", "ladder", "model", "train", "baselines"],
        ["dataset", "ood_dataset", "ladder", "model", "train"],
    )
    for key in ("dataset", "ood_dataset"):
        check_type(f"image.{key}", image[key], str)
    check_type("image.ladder", image["ladder"], list[str])
    check_unique("image.ladder", image["ladder"])
    check_model("image.model", image["model"], IMAGE_MODEL_SET)
    check_train("image.train", image["train"])
    check_split_read(params, "image.dataset (train)", image["dataset"], "train")
    check_batch_fits(params, "image.train", image["dataset"], image["train"])
    check_split_read(params, "image.val_split", image["dataset"], image.get("val_split", "val"))
    check_split_read(params, "image.test_split", image["dataset"], image.get("test_split", "val"))
    check_split_read(params, "image.ood_split", image["ood_dataset"], image.get("ood_split", "test"))
    _check_image_size(params, "image.model.tokenizer", image["model"].get("tokenizer"), image["dataset"])
    check_baselines(params)


def check_baselines(params: dict) -> None:
    """``image.baselines.<name>``: the baseline's config dataclass, less what the pipeline sets."""
    baselines = params["image"].get("baselines") or {}
    check_keys("image.baselines", baselines, list(BASELINES))
    set_by = {"variant": "the ladder run", "num_classes": "the dataset", "selection_seed": "the seed"}
    for name, section in baselines.items():
        check_dataclass(f"image.baselines.{name}", section or {}, BASELINES[name][0], set_by)
        if name == "neural_interpreter" and "tokenizer" in (section or {}):
            check_tokenizer(f"image.baselines.{name}.tokenizer", section["tokenizer"])


def _check_image_size(params: dict, where: str, tok: Any, dataset: str) -> None:
    """The tokenizer's ``image_size`` must be the dataset's, when both are params."""
    if not isinstance(tok, dict) or "image_size" not in tok or dataset not in _REGISTRY:
        return
    size = {**_REGISTRY[dataset].defaults, **(params["data"].get(dataset) or {})}.get("image_size")
    if isinstance(size, int) and size != tok["image_size"]:
        raise ParamsError(
            f"{where}.image_size={tok['image_size']} but data.{dataset}.image_size={size}; "
            "the tokenizer must read the dataset's image size"
        )


def check_fewshot(params: dict, protocol: type) -> None:
    """``fewshot``; ``protocol`` is the protocol's dataclass (``FewShotConfig``)."""
    fs = check_keys("fewshot", params["fewshot"], ["source", "runs", "targets", "seed", "protocol", "pretrain"])
    if "runs" in fs:
        check_type("fewshot.runs", fs["runs"], list[str])
        check_unique("fewshot.runs", fs["runs"])
    if "targets" in fs:
        check_type("fewshot.targets", fs["targets"], list[str])
        check_unique("fewshot.targets", fs["targets"])
    if "seed" in fs:
        check_type("fewshot.seed", fs["seed"], NONNEGATIVE_INT)
    if fs.get("protocol") is not None:
        check_dataclass("fewshot.protocol", fs["protocol"], protocol)
    pre = fs.get("pretrain")
    if pre is not None:
        check_keys(
            "fewshot.pretrain",
            pre,
            ["dataset", "val_split", "model", "perceiver_io", "train"],
            ["dataset", "model", "train"],
        )
        check_type("fewshot.pretrain.dataset", pre["dataset"], str)
        check_model("fewshot.pretrain.model", pre["model"], TRACK_MODEL_SET)
        if pre.get("perceiver_io") is not None:
            check_dataclass("fewshot.pretrain.perceiver_io", pre["perceiver_io"], ModelConfig, TRACK_MODEL_SET)
        check_train("fewshot.pretrain.train", pre["train"])


def check_track(params: dict, track: str) -> None:
    """A track section ``{dataset, runs, val_split, test_split, model, train[, ngram][, analysis]}``."""
    valid = ["dataset", "runs", "val_split", "test_split", "model", "train", "ngram"]
    if track == "nlvr":
        valid.append("analysis")
    sec = params[track]
    if not isinstance(sec, dict):
        raise ParamsError(
            f"{track} must be a mapping {{{', '.join(valid)}}}; see conf/base.yaml for a complete {track} section"
        )
    for key in ("dataset", "runs", "model", "train"):
        if key not in sec:
            raise ParamsError(f"{track}.{key} is missing; see conf/base.yaml for a complete {track} section")
    check_keys(track, sec, valid)
    check_type(f"{track}.dataset", sec["dataset"], str)
    check_type(f"{track}.runs", sec["runs"], list[str])
    check_unique(f"{track}.runs", sec["runs"])
    check_model(f"{track}.model", sec["model"], TRACK_MODEL_SET)
    check_train(f"{track}.train", sec["train"])
    if sec.get("ngram") is not None:
        check_table(f"{track}.ngram", sec["ngram"], NGRAM_KEYS)
    if sec.get("analysis") is not None:
        check_table(f"{track}.analysis", sec["analysis"], NLVR_ANALYSIS_KEYS)
    check_split_read(params, f"{track}.dataset (train)", sec["dataset"], "train")
    check_batch_fits(params, f"{track}.train", sec["dataset"], sec["train"])
    for key in ("val_split", "test_split"):
        check_split_read(params, f"{track}.{key}", sec["dataset"], sec.get(key, key.split("_")[0]))
