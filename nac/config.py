"""Model configuration: one dataclass that says which rung of the Table 1 ladder to build and
at what size. It is what a checkpoint stores to rebuild the model (plain JSON-able values)."""

from __future__ import annotations

import numbers
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

from nac.circuits.kernel import KERNEL_MODES, TRUNCATION_MODES
from nac.circuits.modfc import MODFC_GAINS
from nac.circuits.tokenizers import TOKENIZERS
from nac.graphs import PRIORS

# The Table 1 ladder: settings of one executor.
#   perceiver_io: plain linear layers, dense all-to-all attention, learned latents
#   modfc:        ModFC layers conditioned on codes, dense graph
#   frozen_graph: ModFC, signatures fixed so the kernel reproduces a Barabasi-Albert graph
#   nac:          ModFC, learnable signatures fitted at initialisation to a graph sampled from
#                 the prior, graph-structure regularizer towards the prior's target
VARIANTS = ("perceiver_io", "modfc", "frozen_graph", "nac")
GENERATORS = ("unconditional", "conditional")
REGULARIZER_KINDS = ("mse", "kl", "none")  # none: the regularizer-off control
SIGNATURE_INITS = ("prior", "random")
# The switches of issue 25 (docs/reference.md, "Switches"): the first choice is the default (the paper
# where it is explicit, else the authors' TINY-INET-NC-X template), the others nac's or m2mKD's forms.
SIGNATURE_FITS = ("authors", "margin")
MATCHINGS = ("hungarian", "search")
TARGET_DIAGONALS = ("formula", "one")
DROP_PATH_SCHEDULES = ("uniform", "linear")
INITIAL_STATES = ("mlp", "code")


class NotImplementedSetting(NotImplementedError, ValueError):
    """A config value that names a form this code does not implement (a ValueError too, so params
    validation reports it by key)."""


class ConfigTypeError(TypeError, ValueError):
    """A config field holds a value of the wrong type (a ValueError too, so callers that turn a bad
    config into a params error catch it)."""


@lru_cache(maxsize=None)
def _field_types(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints.get(f.name, Any)) for f in fields(cls))


def _is_type(value: Any, tp: Any) -> bool:
    """Whether ``value`` has the annotated type ``tp`` (an int is a float; a bool is no number;
    a tuple is a list); annotations other than these builtins and their unions pass."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return True
    if tp is None or tp is type(None):
        return value is None
    if origin is typing.Union or origin is types.UnionType:
        return any(_is_type(value, a) for a in args)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (list, tuple) or origin in (list, tuple):
        return isinstance(value, (list, tuple)) and (
            origin is not list or not args or all(_is_type(v, args[0]) for v in value)
        )
    if tp is dict or origin is dict:
        return isinstance(value, dict)
    return True


def _type_name(tp: Any) -> str:
    if tp is None or tp is type(None):
        return "None"
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def check_field_types(obj: Any) -> None:
    """Check every field of the dataclass ``obj`` against its annotation before any arithmetic
    on it, so ``ModelConfig(d_model="64")`` names the field and the type instead of failing deep
    inside; raises ``ConfigTypeError``. Covers every field, including ones added later."""
    section = getattr(obj, "section", type(obj).__name__).split()[0]
    for name, tp in _field_types(type(obj)):
        value = getattr(obj, name)
        if not _is_type(value, tp):
            kind = "bool" if isinstance(value, bool) else type(value).__name__
            got = "None" if value is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
            hint = " (remove the quotes)" if isinstance(value, str) and _numeric_text(value) else ""
            raise ConfigTypeError(
                f"{type(obj).__name__}: {section}.{name}={value!r} is {got}; expected {_type_name(tp)}{hint}"
            )


def _numeric_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class ConfigDict:
    """``to_dict`` / ``from_dict`` for a config dataclass; unknown keys are rejected by name."""

    section = "config"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.section} keys {unknown}; valid keys: {sorted(known)}")
        return cls(**d)


@dataclass
class ModelConfig(ConfigDict):
    section = "model config"
    variant: str = "nac"
    generator: str = "unconditional"
    num_classes: int = 10
    tokenizer: dict[str, Any] = field(default_factory=lambda: {"kind": "conv32", "dim": 64, "pos_dim": 16})
    cond_tokenizer: dict[str, Any] | None = None  # conditional NAC: what the generator reads
    d_model: int = 64
    d_code: int | None = None  # defaults to d_model (authors: code = state width)
    d_sig: int = 32
    n_processor: int = 32
    n_readout: int = 4
    depth: int = 2
    heads: int = 4
    readin_heads: int = 1
    readout_heads: int = 1
    generator_heads: int = 4
    ffn_mult: float = 2.0
    gated_ffn: bool = False
    drop_path: float = 0.0
    layer_scale: float | None = None
    alpha_init: float = 0.1
    tau: float = 0.5  # Concrete temperature (eq. 2)
    # The defaults are the default template's (conf/template/inet_baral.yaml): the authors' regularized
    # family INET-110E-NC-*-BARAL-X for the kernel, TINY-INET-NC-X for the rest (docs/reference.md).
    bandwidth: float = 1.0  # eps of eq. 2 (its initial value when learnable)
    learn_bandwidth: bool = False  # BARAL: fixed (TINY-INET-NC-X: a learnable scalar per kernel)
    truncation: float | None = None  # BARAL: none (TINY-INET-NC-X: P = 0 where 1 - cos > 0.9)
    straight_through: bool = True  # authors' flag; gradient through cut pairs only with "masked"
    truncation_mode: str = "direct"  # authors' default: cut links get exactly zero gradient
    kernel_per_module: bool = False  # BARAL: one fixed kernel, regularised once (TINY: one per module)
    stochastic_kernel: bool = True  # paper eqs. 2-3 (TINY-INET-NC-X: off)
    sample_readout: bool = True  # the read-out's kernel sampled too (m2mKD: not)
    truncate_readout: bool = False  # authors: the read-out kernel is untruncated
    readout_residual: bool = False  # authors' pooling: no attention residual (nac v1: true)
    readout_norm: bool = False  # authors' pooling scores raw states (nac v1: a LayerNorm)
    readout_layer_scale: float | None = 0.1  # authors (Tiny, m2mKD): LayerScale 0.1 in the read-out
    modfc_norm_affine: bool = False  # authors: LayerNorm(W_c c) without scale or shift
    modfc_gain: str = "one_plus_alpha"  # paper eq. 1 (TINY-INET-NC-X's class default: ln_only)
    drop_path_schedule: str = "uniform"  # authors: one rate in every layer (nac v1: linear)
    input_latents: int = 0  # 0: read into the processors (eqs. 4-5); N: N input latents (authors)
    initial_state: str = "mlp"  # paper section 2.2: an MLP of the code (authors: the code)
    state_noise: float = 0.0  # std of noise on the initial states in training
    code_noise: float = 0.0  # std of noise on the codes in training (m2mKD: 0.05)
    delta: float = 1e-6  # eq. 3
    eval_kernel: str = "expectation"
    prior: str = "scale_free"  # nac: the graph prior of the regularizer
    prior_params: dict[str, Any] = field(default_factory=dict)
    regularizer: str = "mse"
    matching: str = "hungarian"  # authors: one Hungarian matching (nac v1: the wider search)
    target_diagonal: str = "formula"  # authors: the target's formula on its diagonal (nac v1: 1)
    signature_init: str = "prior"  # nac: fitted to a graph sampled from `prior`, or random
    frozen_graph_m: int = 2  # frozen_graph: Barabasi-Albert attachment m
    graph_seed: int = 0  # the sampled graph of a preset initialisation
    signature_fit_steps: int = 1000  # authors' preset fit: Adam steps at lr 1e-3
    signature_fit: str = "authors"  # authors' plain mean hinge (nac v1: margin 0.1, balanced)
    # the cosine distance at which the preset fit separates linked from unlinked pairs: the authors' preset
    # default 0.8 (their Barabasi-Albert presets, every regularized template); null: the kernel's
    # truncation (their watts-strogatz / planted presets pass it), else bandwidth * ln 2 (P > 0.5)
    signature_fit_threshold: float | None = 0.8
    generator_query_init: float = 1.0  # conditional: std of the generator's queries (authors' randn)
    generator_regularizer: bool = False  # conditional: regularize every sample's P (paper §4.4: none)

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.d_code is None:
            self.d_code = self.d_model
        self.validate()

    def validate(self) -> None:
        _choice("variant", self.variant, VARIANTS)
        _choice("generator", self.generator, GENERATORS)
        _choice("eval_kernel", self.eval_kernel, KERNEL_MODES)
        _choice("prior", self.prior, PRIORS)
        _choice("regularizer", self.regularizer, REGULARIZER_KINDS)
        _choice("signature_init", self.signature_init, SIGNATURE_INITS)
        _choice("tokenizer.kind", self.tokenizer.get("kind"), TOKENIZERS)
        _choice("truncation_mode", self.truncation_mode, TRUNCATION_MODES)
        _choice("signature_fit", self.signature_fit, SIGNATURE_FITS)
        _choice("matching", self.matching, MATCHINGS)
        _choice("target_diagonal", self.target_diagonal, TARGET_DIAGONALS)
        _choice("modfc_gain", self.modfc_gain, MODFC_GAINS)
        _choice("drop_path_schedule", self.drop_path_schedule, DROP_PATH_SCHEDULES)
        _choice("initial_state", self.initial_state, INITIAL_STATES)
        if int(self.input_latents) < 0:
            raise ValueError(
                f"model.input_latents must be >= 0 (0: read into the processor modules), got {self.input_latents}"
            )
        if self.state_noise < 0 or self.code_noise < 0:
            raise ValueError(
                f"model.state_noise and model.code_noise are standard deviations and must be >= 0, got "
                f"{self.state_noise}, {self.code_noise}"
            )
        if self.readout_layer_scale is not None and not self.readout_layer_scale > 0:
            raise ValueError(
                f"model.readout_layer_scale must be > 0 or null (no LayerScale), got {self.readout_layer_scale}"
            )
        if self.initial_state == "code" and self.d_code != self.d_model:
            raise ValueError(
                f"model.initial_state='code' makes the initial states the codes, so it needs d_code == "
                f"d_model; got d_code={self.d_code}, d_model={self.d_model} (set d_code: null)"
            )
        for name in (
            "num_classes",
            "d_model",
            "d_code",
            "d_sig",
            "n_processor",
            "n_readout",
            "depth",
            "heads",
            "readin_heads",
            "readout_heads",
            "generator_heads",
        ):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model.{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("heads", "readin_heads", "readout_heads", "generator_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"model.d_model={self.d_model} is not divisible by model.{name}={getattr(self, name)}; "
                    "pick a head count that divides d_model"
                )
        if not (self.tau > 0 and self.bandwidth > 0 and self.delta >= 0):
            raise ValueError(
                f"need tau > 0, bandwidth > 0, delta >= 0; got tau={self.tau}, bandwidth={self.bandwidth}, "
                f"delta={self.delta}"
            )
        if self.truncation is not None and not 0 < self.truncation < 2:
            raise ValueError(
                f"model.truncation is a cosine distance and must lie in (0, 2) (or null: no truncation), "
                f"got {self.truncation}"
            )
        if self.signature_fit_threshold is not None and not 0 < self.signature_fit_threshold < 2:
            raise ValueError(
                f"model.signature_fit_threshold is a cosine distance and must lie in (0, 2) (or null: the kernel's "
                f"truncation), got {self.signature_fit_threshold}"
            )
        if not 0 <= self.drop_path < 1:
            raise ValueError(f"model.drop_path must be in [0, 1), got {self.drop_path}")
        if not self.generator_query_init > 0:
            raise ValueError(
                f"model.generator_query_init (std of the conditional generator's queries) must be > 0, "
                f"got {self.generator_query_init}"
            )
        if self.generator == "conditional":
            if self.variant != "nac":
                raise ValueError(
                    f"a conditional circuit generator needs variant 'nac' (signatures and codes), got {self.variant!r}"
                )
            if not self.cond_tokenizer:
                raise ValueError(
                    "generator 'conditional' needs model.cond_tokenizer (what the circuit generator reads)"
                )
        if self.variant == "frozen_graph" and self.frozen_graph_m < 1:
            raise ValueError(
                f"model.frozen_graph_m (Barabasi-Albert attachment) must be >= 1, got {self.frozen_graph_m}"
            )

    @property
    def modulated(self) -> bool:
        return self.variant != "perceiver_io"

    @property
    def uses_kernel(self) -> bool:
        return self.variant in ("frozen_graph", "nac")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"model.{name}={value!r} is not a valid choice; valid choices: {', '.join(choices)}")
