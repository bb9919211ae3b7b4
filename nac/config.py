"""Model configuration: one dataclass that says which rung of the Table 1 ladder to build and
at what size. It is what a checkpoint stores to rebuild the model (plain JSON-able values)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from nac.circuits.kernel import KERNEL_MODES, TRUNCATION_MODES
from nac.circuits.modfc import MODFC_GAINS
from nac.fields import (
    COSINE_DISTANCE,
    FRACTION,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    article,
    as_number,
    field_types,
    problem,
    value_message,
)
from nac.graphs import PRIORS
from nac.rules import model_rules

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


def check_field_types(obj: Any) -> None:
    """Check every field of the dataclass ``obj`` against its annotation (type, choices, bounds:
    ``nac.fields``, by pydantic) before any arithmetic on it, so ``ModelConfig(d_model="64")`` names
    the field and the type instead of failing deep inside. A wrong type raises ``ConfigTypeError``;
    a value outside the choices or bounds ``ValueError``. Covers every field, including ones added later."""
    section = getattr(obj, "section", type(obj).__name__).split()[0]
    for name, tp in field_types(type(obj)).items():
        value = getattr(obj, name)
        bad = problem(value, tp)
        if bad is None:
            continue
        said = value_message(f"{section}.{name}", value, bad)
        if said is not None:
            raise ValueError(said)
        hint = " (remove the quotes)" if isinstance(value, str) and as_number(value) is not None else ""
        raise ConfigTypeError(
            f"{type(obj).__name__}: {section}.{name}={value!r} is {article(value)}; expected {bad.want}{hint}"
        )


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
    variant: Literal[VARIANTS] = "nac"
    generator: Literal[GENERATORS] = "unconditional"
    num_classes: POSITIVE_INT = 10
    tokenizer: dict[str, Any] = field(default_factory=lambda: {"kind": "conv32", "dim": 64, "pos_dim": 16})
    cond_tokenizer: dict[str, Any] | None = None  # conditional NAC: what the generator reads
    d_model: POSITIVE_INT = 64
    d_code: POSITIVE_INT | None = None  # defaults to d_model (authors: code = state width)
    d_sig: POSITIVE_INT = 32
    n_processor: POSITIVE_INT = 32
    n_readout: POSITIVE_INT = 4
    depth: POSITIVE_INT = 2
    heads: POSITIVE_INT = 4
    readin_heads: POSITIVE_INT = 1
    readout_heads: POSITIVE_INT = 1
    generator_heads: POSITIVE_INT = 4
    ffn_mult: POSITIVE = 2.0
    gated_ffn: bool = False
    drop_path: FRACTION = 0.0
    layer_scale: POSITIVE | None = None
    alpha_init: NONNEGATIVE = 0.1
    tau: POSITIVE = 0.5  # Concrete temperature (eq. 2)
    # The defaults are the default template's (conf/template/inet_baral.yaml): the authors' regularized
    # family INET-110E-NC-*-BARAL-X for the kernel, TINY-INET-NC-X for the rest (docs/reference.md).
    bandwidth: POSITIVE = 1.0  # eps of eq. 2 (its initial value when learnable)
    learn_bandwidth: bool = False  # BARAL: fixed (TINY-INET-NC-X: a learnable scalar per kernel)
    truncation: COSINE_DISTANCE | None = None  # BARAL: none (TINY-INET-NC-X: P = 0 where 1 - cos > 0.9)
    straight_through: bool = True  # authors' flag; gradient through cut pairs only with "masked"
    truncation_mode: Literal[TRUNCATION_MODES] = "direct"  # authors' default: cut links get exactly zero gradient
    kernel_per_module: bool = False  # BARAL: one fixed kernel, regularised once (TINY: one per module)
    stochastic_kernel: bool = True  # paper eqs. 2-3 (TINY-INET-NC-X: off)
    sample_readout: bool = True  # the read-out's kernel sampled too (m2mKD: not)
    truncate_readout: bool = False  # authors: the read-out kernel is untruncated
    readout_residual: bool = False  # authors' pooling: no attention residual (nac v1: true)
    readout_norm: bool = False  # authors' pooling scores raw states (nac v1: a LayerNorm)
    readout_layer_scale: POSITIVE | None = 0.1  # authors (Tiny, m2mKD): LayerScale 0.1 in the read-out
    modfc_norm_affine: bool = False  # authors: LayerNorm(W_c c) without scale or shift
    modfc_gain: Literal[MODFC_GAINS] = "one_plus_alpha"  # paper eq. 1 (TINY-INET-NC-X's class default: ln_only)
    drop_path_schedule: Literal[DROP_PATH_SCHEDULES] = "uniform"  # authors: one rate in every layer (nac v1: linear)
    input_latents: NONNEGATIVE_INT = 0  # 0: read into the processors (eqs. 4-5); N: N input latents (authors)
    initial_state: Literal[INITIAL_STATES] = "mlp"  # paper section 2.2: an MLP of the code (authors: the code)
    state_noise: NONNEGATIVE = 0.0  # std of noise on the initial states in training
    code_noise: NONNEGATIVE = 0.0  # std of noise on the codes in training (m2mKD: 0.05)
    delta: NONNEGATIVE = 1e-6  # eq. 3
    eval_kernel: Literal[KERNEL_MODES] = "expectation"
    prior: Literal[PRIORS] = "scale_free"  # nac: the graph prior of the regularizer
    prior_params: dict[str, Any] = field(default_factory=dict)
    regularizer: Literal[REGULARIZER_KINDS] = "mse"
    matching: Literal[MATCHINGS] = "hungarian"  # authors: one Hungarian matching (nac v1: the wider search)
    target_diagonal: Literal[TARGET_DIAGONALS] = "formula"  # authors: the target's formula on its diagonal (nac v1: 1)
    signature_init: Literal[SIGNATURE_INITS] = "prior"  # nac: fitted to a graph sampled from `prior`, or random
    frozen_graph_m: POSITIVE_INT = 2  # frozen_graph: Barabasi-Albert attachment m
    graph_seed: NONNEGATIVE_INT = 0  # the sampled graph of a preset initialisation
    signature_fit_steps: NONNEGATIVE_INT = 1000  # authors' preset fit: Adam steps at lr 1e-3
    signature_fit: Literal[SIGNATURE_FITS] = "authors"  # authors' plain mean hinge (nac v1: margin 0.1, balanced)
    # the cosine distance at which the preset fit separates linked from unlinked pairs: the authors' preset
    # default 0.8 (their Barabasi-Albert presets, every regularized template); null: the kernel's
    # truncation (their watts-strogatz / planted presets pass it), else bandwidth * ln 2 (P > 0.5)
    signature_fit_threshold: COSINE_DISTANCE | None = 0.8
    generator_query_init: POSITIVE = 1.0  # conditional: std of the generator's queries (authors' randn)
    generator_regularizer: bool = False  # conditional: regularize every sample's P (paper §4.4: none)

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.d_code is None:
            self.d_code = self.d_model
        model_rules(self)  # the rules across fields (nac.rules)

    @property
    def modulated(self) -> bool:
        return self.variant != "perceiver_io"

    @property
    def uses_kernel(self) -> bool:
        return self.variant in ("frozen_graph", "nac")
