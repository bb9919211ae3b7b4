"""Model configuration: one dataclass that says which rung of the Table 1 ladder to build and
at what size. It is what a checkpoint stores to rebuild the model (plain JSON-able values)."""

from __future__ import annotations

from dataclasses import asdict, field
from typing import Annotated, Any, Literal, Union

import annotated_types as at
from pydantic import Field, WrapValidator, create_model, model_validator

from nac.circuits import tokenizers as T
from nac.circuits.kernel import KERNEL_MODES, TRUNCATION_MODES
from nac.circuits.modfc import MODFC_GAINS
from nac.fields import (
    COSINE_DISTANCE,
    FRACTION,
    NONNEGATIVE,
    NONNEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    TAGS,
    Section,
    config,
)
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


class ConfigDict:
    """``to_dict`` / ``from_dict`` of a config class (``nac.fields.config``)."""

    section = "config"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return cls(**d)


# ------------------------------------------------------------------------------- tokenizers
# Each tokenizer kind's keys (nac.circuits.tokenizers' arguments); a key left out takes the default.
class _Conv32(Section):
    kind: Literal["conv32"]
    dim: POSITIVE_INT = None
    pos_dim: POSITIVE_INT = None
    image_size: Annotated[POSITIVE_INT, at.MultipleOf(4)] = None  # two stride-2 convolutions
    norm: str = None
    width: POSITIVE_INT = None


class _ConvNext(Section):
    kind: Literal["convnext"]
    depths: list[NONNEGATIVE_INT] = None  # blocks per stage (BARAL-X's femto: [1, 0])
    dims: list[POSITIVE_INT] = None
    pos_dim: POSITIVE_INT = None
    image_size: POSITIVE_INT = None

    @model_validator(mode="after")
    def _stride(self):
        stride = 4 * 2 ** (len(self.depths or [0]) - 1)
        if self.image_size is not None and self.depths is not None and self.image_size % stride:
            raise ValueError(f"image_size={self.image_size} must be divisible by {stride} (the stride of its stages)")
        return self


def _kind(kind: str, **keys: Any) -> type:
    return create_model(
        f"_{kind}", __base__=Section, kind=(Literal[kind], ...), **{k: (v, None) for k, v in keys.items()}
    )


_IMAGE = Annotated[_Conv32 | _ConvNext, Field(discriminator="kind")]
TOKENIZER_KEYS = {
    "conv32": _Conv32,
    "convnext": _ConvNext,
    "points": _kind("points", dim=POSITIVE_INT, n_freqs=NONNEGATIVE_INT),
    "sequence": _kind("sequence", vocab_size=POSITIVE_INT, dim=POSITIVE_INT, max_length=POSITIVE_INT, positional=str),
    "features": _kind("features", d_feat=POSITIVE_INT, dim=POSITIVE_INT),
    "image_pair": create_model("_image_pair", __base__=Section, kind=(Literal["image_pair"], ...), image=(_IMAGE, ...)),
}
assert tuple(TOKENIZER_KEYS) == T.TOKENIZERS
TAGS.update(TOKENIZER_KEYS)  # a location names the key, not the tokenizer's kind


def _as_given(value: Any, handler) -> Any:
    handler(value)  # checked as its kind's keys; the config keeps the mapping it was given
    return value


Tokenizer = Annotated[
    Union[tuple(TOKENIZER_KEYS.values())],  # noqa: UP007
    Field(discriminator="kind"),
    WrapValidator(_as_given),
]


@config
class ModelConfig(ConfigDict):
    section = "model"
    variant: Literal[VARIANTS] = "nac"
    generator: Literal[GENERATORS] = "unconditional"
    num_classes: POSITIVE_INT = 10
    tokenizer: Tokenizer = field(default_factory=lambda: {"kind": "conv32", "dim": 64, "pos_dim": 16})
    cond_tokenizer: Tokenizer | None = None  # conditional NAC: what the generator reads
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
    # one head's width in the read-in, the propagators and the read-out (BARAL-X: 64, so 1 x 64 in the
    # read-in and read-out and 8 x 64 = 512 in the propagators at d_model 384); null: d_model / heads
    head_dim: POSITIVE_INT | None = None
    qkv_bias: bool = False  # biases on the attention's q and v (BARAL-X: none; TINY-INET-NC-X: yes)
    ffn_mult: POSITIVE = 4.0  # hidden width / d_model of every ModFFN (BARAL-X: 4)
    gated_ffn: bool = True  # GEGLU (BARAL-X) or GELU (TINY-INET-NC-X) ModFFNs
    drop_path: FRACTION = 0.0
    layer_scale: POSITIVE | None = None
    alpha_init: NONNEGATIVE = 0.1
    tau: POSITIVE = 0.5  # Concrete temperature (eq. 2)
    # The defaults are the default template's (conf/template/inet_baral.yaml): the authors' regularized
    # INET-110E-NC-CHONKER-BARAL-X for every block of the model (docs/reference.md, "Configurations").
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
    readout_layer_scale: POSITIVE | None = None  # BARAL-X: none (TINY-INET-NC-X, m2mKD: 0.1)
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

    @model_validator(mode="after")
    def _rules(self):
        if self.d_code is None:
            self.d_code = self.d_model
        if self.initial_state == "code" and self.d_code != self.d_model:  # the codes are the initial states
            raise ValueError(
                f"initial_state='code' needs d_code == d_model, got {self.d_code} != {self.d_model}; set d_code: null"
            )
        split = ("generator_heads",) if self.head_dim else ("heads", "readin_heads", "readout_heads", "generator_heads")
        for name in split:
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"model.d_model={self.d_model} is not divisible by model.{name}={getattr(self, name)}; "
                    "pick a head count that divides d_model" + ("" if self.head_dim else " or set model.head_dim")
                )
        if self.generator == "conditional" and self.variant != "nac":
            raise ValueError(
                f"generator 'conditional' needs variant 'nac' (signatures and codes), got {self.variant!r}"
            )
        if self.generator == "conditional" and not self.cond_tokenizer:
            raise ValueError("generator 'conditional' needs model.cond_tokenizer (what the circuit generator reads)")
        return self

    @property
    def modulated(self) -> bool:
        return self.variant != "perceiver_io"

    @property
    def uses_kernel(self) -> bool:
        return self.variant in ("frozen_graph", "nac")
