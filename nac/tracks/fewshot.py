"""Few-shot adaptation (Figure 4): fine-tune a pre-trained NAC and Perceiver IO on ``ways``-way
episodes with 1, 2, 4, 8, 16 labelled examples per class and measure accuracy on held-out
queries of the same classes.

Protocol (all in the ``fewshot`` params section):

- pre-trained models: the image track's checkpoints (``source: image``; ``perceiver_io`` and
  ``nac-<prior>``, episode ``e`` uses the checkpoint of seed ``seeds[e % len(seeds)]``), or models
  pre-trained by the ``pretrain`` stage (``source: pretrain``, the paper profile's ImageNet settings).
- episode ``e`` of a target: ``ways`` classes drawn without replacement; per class a fixed random
  order of its support-split examples, of which a ``k``-shot episode takes the first ``k``
  (support sets are nested across shot counts); ``queries_per_class`` query examples per class
  from the query split (the same queries for every shot count and both models).
- adaptation: the classifier layer is replaced by a new ``ways``-way one; the parameters named in
  ``freeze`` (prefixes, default the tokenizer) stay fixed and in eval mode; everything else is
  trained with AdamW for ``steps`` steps on the support set (full batch up to ``batch_size``,
  else random mini-batches), cross-entropy plus the pre-training's graph regularizer.
- NAC and Perceiver IO see identical episodes, so their difference is paired per episode.

The baselines (runs ``neural_interpreter`` and ``modular_network``, the image track's checkpoints
of the same names) see the same episodes, seeds, steps, optimiser and loss (their graph
regularizer is 0) with their own few-shot heads (``nac.baselines.fewshot``): the Neural
Interpreter's fine-tuning protocol (new CLS token and head, ``ni_new_functions`` optional new
functions, old parameters frozen) and, for the Modular Network (no protocol in its paper), this
protocol's own (new head; the modules train, ``mn_train: head`` freezes them), with the
controller's mode selection frozen and no EM.

Optimisations (tested equal to the plain form): with a frozen tokenizer the tokens of the support
and query images are computed once per episode instead of at every step; a NAC's link
probabilities ``P`` are computed once per adaptation step for the forward and the regularizer
(``nac.training.Objective``), and once per evaluation for every batch of queries.
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import annotated_types as at
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from nac.baselines.fewshot import MN_TRAIN, prepare_baseline
from nac.checkpoint_io import load_model
from nac.config import ConfigDict
from nac.fields import AT_LEAST_2, NONNEGATIVE, NONNEGATIVE_INT, POSITIVE_INT, Real, config, given
from nac.model import NAC
from nac.pipeline.datasets import builder
from nac.pipeline.io import write_json
from nac.pipeline.paths import MODELS, fewshot_image_run, image_checkpoint, pretrain_checkpoint
from nac.progress import bar_kwargs
from nac.training.distributed import resolve_device
from nac.training.objective import Objective

if TYPE_CHECKING:  # it imports FewShotConfig from here
    from nac.pipeline.schema_models import FewShot


@config
class FewShotConfig(ConfigDict):
    section = "fewshot.protocol"
    ways: AT_LEAST_2 = 8
    shots: Annotated[list[POSITIVE_INT], at.MinLen(1)] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    episodes: POSITIVE_INT = 5
    queries_per_class: POSITIVE_INT = 40
    steps: POSITIVE_INT = 30
    lr: Annotated[Real, at.Gt(0), at.Le(1)] = 1e-3
    weight_decay: NONNEGATIVE = 0.0
    batch_size: POSITIVE_INT = 128
    reg_weight: NONNEGATIVE = 0.1
    freeze: list[str] = field(default_factory=lambda: ["tokenizer"])
    precompute_tokens: bool = True
    support_split: str = "train"
    query_split: str = "test"
    ni_new_functions: NONNEGATIVE_INT = 0  # Neural Interpreter: new functions per script (nac.baselines.fewshot)
    mn_train: Literal[MN_TRAIN] = "modules"  # Modular Network: "modules" or "head" (nac.baselines.fewshot)


@dataclass
class Episode:
    classes: np.ndarray  # [ways] original class ids
    support: dict[int, np.ndarray]  # shots -> indices into the support split ([ways * shots], class-major)
    query: np.ndarray  # indices into the query split


def sample_episode(support_labels: np.ndarray, query_labels: np.ndarray, cfg: FewShotConfig, seed: int) -> Episode:
    """One episode (see the module docstring), deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    classes_all = np.intersect1d(np.unique(support_labels), np.unique(query_labels))
    need = max(cfg.shots)
    usable = [c for c in classes_all if (support_labels == c).sum() >= need]
    if len(usable) < cfg.ways:
        raise ValueError(
            f"few-shot: only {len(usable)} classes have >= {need} support examples; "
            f"{cfg.ways}-way episodes need {cfg.ways}. Lower fewshot.ways or max(fewshot.shots)"
        )
    classes = np.sort(rng.choice(np.asarray(usable), size=cfg.ways, replace=False))
    order = {c: rng.permutation(np.flatnonzero(support_labels == c)) for c in classes}
    support = {k: np.concatenate([order[c][:k] for c in classes]) for k in cfg.shots}
    query = np.concatenate(
        [rng.permutation(np.flatnonzero(query_labels == c))[: cfg.queries_per_class] for c in classes]
    )
    return Episode(classes, support, query)


def _stack(data, idx: np.ndarray, image_size: int | None = None) -> torch.Tensor:
    """The inputs at ``idx``; images resized (bilinear, antialiased; floats in [0, 1]) when the
    pre-trained tokenizer reads another size (CIFAR's 32 px for a 224 px ImageNet model)."""
    x = torch.stack([data[int(i)]["input"] for i in idx])
    if image_size and x.dim() == 4 and x.shape[-1] != image_size:
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True, align_corners=False)
    return x


def _relabel(labels: np.ndarray, classes: np.ndarray) -> torch.Tensor:
    lookup = {int(c): i for i, c in enumerate(classes)}
    return torch.tensor([lookup[int(y)] for y in labels], dtype=torch.long)


def prepare_model(pretrained: nn.Module, ways: int, freeze: list[str], seed: int) -> nn.Module:
    """A copy of ``pretrained`` with a new ``ways``-way classifier and the ``freeze`` prefixes
    fixed (``requires_grad=False``)."""
    model = copy.deepcopy(pretrained)
    torch.manual_seed(seed)
    old = model.read_out.head
    model.read_out.head = nn.Linear(old.in_features, ways)
    model.config = copy.deepcopy(model.config)
    model.config.num_classes = ways
    for name, p in model.named_parameters():
        p.requires_grad = not any(name == f or name.startswith(f + ".") for f in freeze)
    return model


def _set_mode(model: nn.Module, freeze: list[str]) -> None:
    """Train mode, except frozen sub-modules, which stay in eval mode (BatchNorm statistics fixed)."""
    model.train()
    for name, module in model.named_modules():
        if name and any(name == f or name.startswith(f + ".") for f in freeze):
            module.eval()


def adapt(
    pretrained: nn.Module,
    support_x: torch.Tensor,
    support_y: torch.Tensor,
    cfg: FewShotConfig,
    seed: int,
    device: torch.device | str = "cpu",
    precompute_tokens: bool | None = None,
) -> nn.Module:
    """Fine-tune a copy of ``pretrained`` on the support set (see the module docstring).

    With ``precompute_tokens`` (default ``cfg.precompute_tokens``) and a frozen tokenizer, the
    support tokens are computed once and the returned model's tokenizer is ``nn.Identity`` (it
    reads tokens: pass ``pretrained.tokenizer`` outputs); otherwise it reads images.
    """
    device = torch.device(device)
    precompute = cfg.precompute_tokens if precompute_tokens is None else precompute_tokens
    model, freeze = _prepare(pretrained, cfg, seed)  # NAC / Perceiver IO: prepare_model(...), cfg.freeze
    model = model.to(device)
    support_x, support_y = support_x.to(device), support_y.to(device)
    if precompute and "tokenizer" in freeze:  # frozen + eval mode: the same tokens at every step
        model.tokenizer.eval()
        with torch.no_grad():
            support_x = model.tokenizer(support_x)
        model.tokenizer = nn.Identity()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    objective = Objective(model)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n = len(support_y)
    for _ in range(cfg.steps):
        _set_mode(model, freeze)
        idx = (torch.randperm(n, generator=gen)[: cfg.batch_size] if n > cfg.batch_size else torch.arange(n)).to(device)
        x, y = support_x[idx], support_y[idx]
        if cfg.reg_weight and isinstance(model, NAC):  # P (eq. 2) computed once, for the forward and the regularizer
            logits, reg = objective(x)
            loss = F.cross_entropy(logits, y) + cfg.reg_weight * reg.to(device)
        else:
            design = model.design()
            loss = F.cross_entropy(model(x, design=design), y)
            if cfg.reg_weight:
                loss = loss + cfg.reg_weight * model.graph_regularizer(design).to(device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


# =================================================================================================
# Baselines' few-shot heads (Neural Interpreter, Modular Network): ``nac.baselines.fewshot``.
# NAC and Perceiver IO go through ``prepare_model`` unchanged.
# =================================================================================================
def _prepare(pretrained: nn.Module, cfg: FewShotConfig, seed: int) -> tuple[nn.Module, list[str]]:
    """The model to fine-tune and the module prefixes kept frozen and in eval mode."""
    baseline = prepare_baseline(pretrained, cfg.ways, seed, cfg.ni_new_functions, cfg.mn_train, cfg.freeze)
    return baseline if baseline is not None else (prepare_model(pretrained, cfg.ways, cfg.freeze, seed), cfg.freeze)


def input_size(model: nn.Module) -> int | None:
    """The image size the pre-trained model reads (its tokenizer's, or a Modular Network's)."""
    tokenizer = getattr(model.config, "tokenizer", None)
    if isinstance(tokenizer, dict):
        return tokenizer.get("image_size")
    return getattr(model.config, "image_size", None)


@torch.no_grad()
def query_accuracy(
    model: nn.Module,
    query_x: torch.Tensor,
    query_y: torch.Tensor,
    tokenizer: nn.Module | None = None,
    batch_size: int = 256,
) -> float:
    """Acc@1 (percent) on the queries; ``tokenizer`` first maps them to tokens (for a model
    adapted with precomputed tokens)."""
    model.eval()
    device = next(model.parameters()).device
    shared = {}
    if isinstance(model, NAC):  # an evaluation design draws no noise: one design and P (eq. 2) for every batch
        design = model.design()
        shared = dict(design=design, Ps=model.graph.kernel_probabilities(design))
    preds = []
    for i in range(0, len(query_x), batch_size):
        x = query_x[i : i + batch_size].to(device)
        if tokenizer is not None:
            x = tokenizer.eval()(x)
        preds.append(model(x, **shared).argmax(-1).cpu())
    return float(100.0 * (torch.cat(preds) == query_y.cpu()).float().mean().item())


def adapt_and_evaluate(
    pretrained: nn.Module,
    support_x: torch.Tensor,
    support_y: torch.Tensor,
    query_x: torch.Tensor,
    query_y: torch.Tensor,
    cfg: FewShotConfig,
    seed: int,
    device: torch.device | str = "cpu",
) -> float:
    """Fine-tune a copy of ``pretrained`` on the support set; query Acc@1 in percent."""
    model = adapt(pretrained, support_x, support_y, cfg, seed, device)
    tokenizer = pretrained.tokenizer.to(device) if isinstance(getattr(model, "tokenizer", None), nn.Identity) else None
    return query_accuracy(model, query_x, query_y, tokenizer)


def run_fewshot(
    pretrained: dict[str, list[nn.Module]],
    targets: dict[str, Any],
    cfg: FewShotConfig,
    device: torch.device | str = "cpu",
    progress: bool = True,
    seed: int = 0,
    episodes: Collection[int] | None = None,
) -> list[dict[str, Any]]:
    """All episodes: ``pretrained`` maps a run name to its pre-trained models (one per seed;
    episode ``e`` uses model ``e % len``), ``targets`` maps a target name to its dataset builder.
    ``episodes``: only these episode indices (a converged piece's: those its seed's model serves;
    each episode's rows are the same as in the full run, being seeded by target and index only).
    Returns one row per (target, run, shots, episode)."""
    rows = []
    jobs = [(t, e) for t in targets for e in range(cfg.episodes) if episodes is None or e in episodes]
    bar = tqdm(
        total=len(jobs) * len(pretrained) * len(cfg.shots),
        desc="few-shot",
        unit="fit",
        disable=not progress,
        **bar_kwargs(),
    )
    for t_idx, (target, e) in enumerate(jobs):
        b = targets[target]
        sup, qry = b.load(cfg.support_split), b.load(cfg.query_split)
        sup_labels, qry_labels = _labels(sup), _labels(qry)
        ep_seed = seed * 1_000_003 + sorted(targets).index(target) * 10_007 + e
        ep = sample_episode(sup_labels, qry_labels, cfg, ep_seed)
        for run, models in pretrained.items():
            size = input_size(models[0])
            qx, qy = _stack(qry, ep.query, size), _relabel(qry_labels[ep.query], ep.classes)
            model_index = e % len(models)
            for k in cfg.shots:
                idx = ep.support[k]
                acc = adapt_and_evaluate(
                    models[model_index],
                    _stack(sup, idx, size),
                    _relabel(sup_labels[idx], ep.classes),
                    qx,
                    qy,
                    cfg,
                    seed=ep_seed * 31 + k,
                    device=device,
                )
                rows.append(
                    {
                        "target": target,
                        "run": run,
                        "shots": int(k),
                        "episode": e,
                        "model_index": model_index,
                        "acc1": acc,
                        "n_query": int(len(qy)),
                        "classes": [int(c) for c in ep.classes],
                    }
                )
                bar.update(1)
                bar.set_postfix(target=target, run=run, shots=k)
    bar.close()
    return rows


def _labels(data) -> np.ndarray:
    arrays, rename = getattr(data, "arrays", None), getattr(data, "rename", {})
    if isinstance(arrays, dict):  # a cached ArrayDataset: read the label column without decoding items
        for key, values in arrays.items():
            if rename.get(key, key) == "label":
                return np.asarray(values)
    return np.asarray([int(data[i]["label"]) for i in range(len(data))])


def load_pretrained(
    fs: FewShot, run: str, device, progress: bool = True, *, seeds: list[int], prior: dict, models: str | Path = MODELS
) -> list[nn.Module]:
    """The pre-trained models of one few-shot run (``fs``: the ``fewshot`` section; ``prior``, the
    ``prior`` section, names the image track's NAC), one per seed, from under ``models`` (see the
    module docstring)."""
    if fs.source == "image":
        run = fewshot_image_run(prior, run)
        return [load_model(image_checkpoint(run, s, models), map_location=device) for s in seeds]
    return [load_model(pretrain_checkpoint(run, s, models), map_location=device) for s in seeds]  # the pretrain stage's


def run_target(
    fs: FewShot,
    target: str,
    out_dir: str = "metrics/fewshot",
    progress: bool = True,
    *,
    data: dict,
    seeds: list[int],
    prior: dict,
    device: str = "auto",
    models: str | Path = MODELS,
) -> list[dict]:
    """The stage for one target (``fs``: the ``fewshot`` section; ``data``, ``seeds``, ``prior``,
    ``device``: those sections of params.yaml): every episode, shot count and run; writes
    ``<target>.json`` (protocol + rows) and ``<target>.csv`` (rows)."""
    cfg = FewShotConfig.from_dict(given(fs.protocol))
    device = resolve_device(device)
    b = builder(data, target)
    pretrained = {
        run: [
            m.to(device).eval()
            for m in load_pretrained(fs, run, device, progress, seeds=seeds, prior=prior, models=models)
        ]
        for run in fs.runs
    }
    rows = run_fewshot(pretrained, {target: b}, cfg, device=device, progress=progress, seed=fs.seed)
    for r in rows:
        r["model"] = fewshot_image_run(prior, r["run"]) if fs.source == "image" else r["run"]
    out = Path(out_dir)
    write_json(out / f"{target}.json", {"target": target, "source": fs.source, "protocol": cfg.to_dict(), "rows": rows})
    pd.DataFrame([{k: v for k, v in r.items() if k != "classes"} for r in rows]).to_csv(
        out / f"{target}.csv", index=False
    )
    return rows
