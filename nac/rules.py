"""The configs' rules across fields, in one place.

Each field's type, choices and bounds are its annotation, checked by pydantic in ``nac.fields``
(``nac.config.check_field_types``, before any rule here runs); this module is every rule that
relates two or more fields: what no annotation expresses. Each config calls its rules from
``__post_init__``: ``model_rules`` (``nac.config.ModelConfig``), ``train_rules``
(``nac.training.config.TrainConfig``; ``compile_rules`` also checks a compiled step's own settings,
``nac.training.compiled``), ``neural_interpreter_rules`` and ``modular_network_rules`` (the
baselines' configs, whose fields are plain-typed: their per-field checks are written here too, in
the order and words their messages have always had). A rule raises ``ValueError`` naming the
fields it relates.

The params checks that relate values of params.yaml (a batch against its split's size, a split
read against its size, a tokenizer's image size against its dataset's, the split fractions' sum)
stay in ``nac.pipeline.schema`` and ``schema_models``: they raise ``ParamsError`` (of
``nac.pipeline``, which this module does not import), read the data registry's defaults, and
data-only stages run them without the model code this module imports (the tokenizers).
"""

from __future__ import annotations

from typing import Any

from nac.circuits.tokenizers import TOKENIZERS
from nac.fields import choices, field_types


def _tokenizer_kind(where: str, tokenizer: dict[str, Any]) -> None:
    if tokenizer.get("kind") not in TOKENIZERS:
        raise ValueError(
            f"{where}.kind={tokenizer.get('kind')!r} is not a valid choice; valid choices: {', '.join(TOKENIZERS)}"
        )


def model_rules(cfg: Any) -> None:
    """``ModelConfig``: the tokenizer's kind; ``initial_state='code'`` needs ``d_code == d_model``;
    every head count divides ``d_model``; a conditional generator needs variant ``nac`` and a
    ``cond_tokenizer``."""
    _tokenizer_kind("model.tokenizer", cfg.tokenizer)
    if cfg.initial_state == "code" and cfg.d_code != cfg.d_model:
        raise ValueError(
            f"model.initial_state='code' makes the initial states the codes, so it needs d_code == "
            f"d_model; got d_code={cfg.d_code}, d_model={cfg.d_model} (set d_code: null)"
        )
    for name in ("heads", "readin_heads", "readout_heads", "generator_heads"):
        if cfg.d_model % getattr(cfg, name):
            raise ValueError(
                f"model.d_model={cfg.d_model} is not divisible by model.{name}={getattr(cfg, name)}; "
                "pick a head count that divides d_model"
            )
    if cfg.generator == "conditional":
        if cfg.variant != "nac":
            raise ValueError(
                f"a conditional circuit generator needs variant 'nac' (signatures and codes), got {cfg.variant!r}"
            )
        if not cfg.cond_tokenizer:
            raise ValueError("generator 'conditional' needs model.cond_tokenizer (what the circuit generator reads)")


def train_rules(cfg: Any) -> None:
    """``TrainConfig``: ``min_lr <= lr``, ``warmup_epochs <= epochs``, and ``compile_rules`` on its
    compile settings (their choices read from the fields' annotations)."""
    if cfg.min_lr > cfg.lr:
        raise ValueError(f"need train.min_lr <= train.lr; got lr={cfg.lr}, min_lr={cfg.min_lr}")
    if cfg.warmup_epochs > cfg.epochs:
        raise ValueError(f"train.warmup_epochs must be in [0, epochs={cfg.epochs}], got {cfg.warmup_epochs}")
    kinds = field_types(type(cfg))
    compile_rules(
        cfg.compile,
        cfg.compile_matching,
        cfg.compile_scope,
        modes=choices(kinds["compile"]),
        matchings=choices(kinds["compile_matching"]),
        scopes=choices(kinds["compile_scope"]),
    )


def compile_rules(value, matching: str, scope: str, *, modes, matchings, scopes) -> None:
    """Refuse a ``train.compile`` value not in ``modes`` (``False`` itself, not a number equal to it:
    pydantic takes ``0`` for ``False``), a ``train.compile_matching`` not in ``matchings``, a
    ``train.compile_scope`` not in ``scopes`` (the choices are ``nac.training.config``'s, passed in:
    a compiled step checks its settings with no ``TrainConfig``), and ``compile_scope: step`` with
    nothing compiled."""
    if value is not False and value not in modes[1:]:
        raise ValueError(f"train.compile={value!r}; valid choices: {', '.join(['false', *modes[1:]])}")
    if matching not in matchings:
        raise ValueError(f"train.compile_matching={matching!r}; valid choices: {', '.join(matchings)}")
    if scope not in scopes:
        raise ValueError(f"train.compile_scope={scope!r}; valid choices: {', '.join(scopes)}")
    if scope in ("step", "regional") and value is False:
        raise ValueError(f"train.compile_scope={scope} compiles the step: set train.compile (default, say)")


def _positive(where: str, cfg: Any, names: tuple[str, ...]) -> None:
    for name in names:
        if int(getattr(cfg, name)) < 1:
            raise ValueError(f"{where}.{name} must be a positive integer, got {getattr(cfg, name)!r}")


def neural_interpreter_rules(cfg: Any) -> None:
    """``NeuralInterpreterConfig`` (after its variant): the tokenizer's kind, sizes >= 1, heads
    divide ``d_model``, a positive bandwidth and MLP width, the truncation a cosine distance,
    positive added function groups."""
    _tokenizer_kind("tokenizer", cfg.tokenizer)
    sizes = ("num_classes", "d_model", "d_type", "d_code", "n_functions", "n_scripts", "n_iterations")
    _positive("neural_interpreter", cfg, (*sizes, "loc_layers", "heads", "head_dim", "n_cls_tokens"))
    if cfg.d_model % cfg.heads:
        raise ValueError(f"d_model={cfg.d_model} is not divisible by heads={cfg.heads} (values are split over heads)")
    if not cfg.bandwidth > 0 or not cfg.mlp_mult > 0:
        raise ValueError(f"need bandwidth > 0 and mlp_mult > 0, got {cfg.bandwidth}, {cfg.mlp_mult}")
    if cfg.truncation is not None and not 0 < cfg.truncation <= 2:
        raise ValueError(f"truncation is a cosine distance in (0, 2] (or null), got {cfg.truncation}")
    if any(n < 1 for n in cfg.added_functions):
        raise ValueError(f"added_functions must hold positive group sizes, got {cfg.added_functions}")


def modular_network_rules(cfg: Any) -> None:
    """``ModularNetworkConfig`` (after its variant): sizes >= 1, at least one modular layer of
    positive width, ``pool_after`` names existing conv layers, an odd kernel, an image that survives
    its poolings."""
    sizes = ("num_classes", "image_size", "in_channels", "kernel_size")
    _positive("model", cfg, (*sizes, "modules_per_layer", "k", "e_step_every", "samples"))
    if cfg.dataset_size < 0:
        raise ValueError(f"model.dataset_size must be >= 0, got {cfg.dataset_size}")
    if not cfg.conv_layers and not cfg.dense_layers:
        raise ValueError("a modular network needs at least one modular layer (conv_layers or dense_layers)")
    if any(c < 1 for c in cfg.conv_layers + cfg.dense_layers):
        raise ValueError(
            f"layer widths must be positive: conv_layers={cfg.conv_layers}, dense_layers={cfg.dense_layers}"
        )
    bad = [i for i in cfg.pool_after if not 0 <= i < len(cfg.conv_layers)]
    if bad:
        raise ValueError(
            f"model.pool_after names conv layers {bad} that do not exist ({len(cfg.conv_layers)} conv layers, 0-based)"
        )
    if cfg.kernel_size % 2 == 0:
        raise ValueError(f"model.kernel_size must be odd ('same' padding), got {cfg.kernel_size}")
    if cfg.image_size >> len(cfg.pool_after) < 1:
        raise ValueError(f"image_size={cfg.image_size} is too small for {len(cfg.pool_after)} 2x2 poolings")
