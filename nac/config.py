"""Model configuration: one dataclass that says which rung of the Table 1 ladder to build and
at what size. It is what a checkpoint stores to rebuild the model (plain JSON-able values)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from nac.circuits.kernel import KERNEL_MODES
from nac.circuits.readin import READIN_IMPLS
from nac.circuits.tokenizers import TOKENIZERS

# The Table 1 ladder: settings of one executor.
#   perceiver_io: plain linear layers, dense all-to-all attention, learned latents
#   modfc:        ModFC layers conditioned on codes, dense graph
#   frozen_graph: ModFC, signatures fixed so the kernel reproduces a Barabasi-Albert graph
#   nac:          ModFC, learnable signatures fitted at initialisation to a graph sampled from
#                 the prior, graph-structure regularizer towards the prior's target
VARIANTS = ("perceiver_io", "modfc", "frozen_graph", "nac")
GENERATORS = ("unconditional", "conditional")
PRIORS = ("scale_free", "planted_partition", "ring_of_cliques", "erdos_renyi")
REGULARIZER_KINDS = ("mse", "kl", "none")   # none: the regularizer-off control
SIGNATURE_INITS = ("prior", "random")


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
    cond_tokenizer: dict[str, Any] | None = None     # conditional NAC: what the generator reads
    d_model: int = 64
    d_code: int | None = None                         # defaults to d_model (authors: code = state width)
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
    tau: float = 0.5                                  # Concrete temperature (eq. 2)
    bandwidth: float = 1.0                            # eps of eq. 2 (its initial value when learnable)
    learn_bandwidth: bool = True                      # authors: a learnable scalar, no weight decay
    truncation: float | None = 0.9                    # authors' Tiny-ImageNet templates: P = 0 where 1 - cos > 0.9
    straight_through: bool = True                     # truncated pairs get the untruncated gradient
    delta: float = 1e-6                               # eq. 3
    eval_kernel: str = "expectation"
    readin_impl: str = "fast"
    prior: str = "scale_free"                         # nac: the graph prior of the regularizer
    prior_params: dict[str, Any] = field(default_factory=dict)
    regularizer: str = "mse"
    signature_init: str = "prior"                     # nac: fitted to a graph sampled from `prior`, or random
    frozen_graph_m: int = 2                           # frozen_graph: Barabasi-Albert attachment m
    graph_seed: int = 0                               # the sampled graph of a preset initialisation
    signature_fit_steps: int = 1000                   # authors' preset fit: Adam steps at lr 1e-3
    generator_query_init: float = 1.0                 # conditional: std of the generator's queries (authors' randn)
    generator_regularizer: bool = False               # conditional: regularize every sample's P (paper §4.4: none)

    def __post_init__(self) -> None:
        if self.d_code is None:
            self.d_code = self.d_model
        self.validate()

    def validate(self) -> None:
        _choice("variant", self.variant, VARIANTS)
        _choice("generator", self.generator, GENERATORS)
        _choice("eval_kernel", self.eval_kernel, KERNEL_MODES)
        _choice("readin_impl", self.readin_impl, READIN_IMPLS)
        _choice("prior", self.prior, PRIORS)
        _choice("regularizer", self.regularizer, REGULARIZER_KINDS)
        _choice("signature_init", self.signature_init, SIGNATURE_INITS)
        _choice("tokenizer.kind", self.tokenizer.get("kind"), TOKENIZERS)
        for name in ("num_classes", "d_model", "d_code", "d_sig", "n_processor", "n_readout", "depth", "heads",
                     "readin_heads", "readout_heads", "generator_heads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"model.{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("heads", "readin_heads", "readout_heads", "generator_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(f"model.d_model={self.d_model} is not divisible by model.{name}={getattr(self, name)}; "
                                 "pick a head count that divides d_model")
        if not (self.tau > 0 and self.bandwidth > 0 and self.delta >= 0):
            raise ValueError(f"need tau > 0, bandwidth > 0, delta >= 0; got tau={self.tau}, bandwidth={self.bandwidth}, "
                             f"delta={self.delta}")
        if self.truncation is not None and not 0 < self.truncation < 2:
            raise ValueError(f"model.truncation is a cosine distance and must lie in (0, 2) (or null: no truncation), "
                             f"got {self.truncation}")
        if not 0 <= self.drop_path < 1:
            raise ValueError(f"model.drop_path must be in [0, 1), got {self.drop_path}")
        if not self.generator_query_init > 0:
            raise ValueError(f"model.generator_query_init (std of the conditional generator's queries) must be > 0, "
                             f"got {self.generator_query_init}")
        if self.generator == "conditional":
            if self.variant != "nac":
                raise ValueError(f"a conditional circuit generator needs variant 'nac' (signatures and codes), got {self.variant!r}")
            if not self.cond_tokenizer:
                raise ValueError("generator 'conditional' needs model.cond_tokenizer (what the circuit generator reads)")
        if self.variant == "frozen_graph" and self.frozen_graph_m < 1:
            raise ValueError(f"model.frozen_graph_m (Barabasi-Albert attachment) must be >= 1, got {self.frozen_graph_m}")

    @property
    def modulated(self) -> bool:
        return self.variant != "perceiver_io"

    @property
    def uses_kernel(self) -> bool:
        return self.variant in ("frozen_graph", "nac")



def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"model.{name}={value!r} is not a valid choice; valid choices: {', '.join(choices)}")
