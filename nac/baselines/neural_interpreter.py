"""Neural Interpreters (Rahaman et al., NeurIPS 2021) as a baseline with NAC's model interface.

The two modules read top to bottom like the paper's method section; every equation is one named
piece: eqs. 2-11 in ``nac.baselines.ni_layers`` (re-exported here), the model (eqs. 1, 12-14)
here. Shapes: ``B`` batch, ``V`` variables (set elements: CLS tokens + input tokens), ``U``
functions, ``d`` = ``d_model``, ``H`` heads.

* eq. 1   ``NeuralInterpreter``         a stack of ``n_scripts`` scripts (+ tokenizer, CLS, head)
* eq. 2   ``TypeInference``             ``t_i`` on the unit sphere of ``d_type`` dims
* eq. 2   ``truncated_kernel``          ``C~_ui = exp(-(1 - s_u . t_i) / sigma)``, 0 beyond ``tau``
* eq. 3   ``normalize_compatibilities`` ``C_ui = C~_ui / (eps + sum_u C~_ui)``
* eq. 4   ``ModLin``                    ``W (x * LayerNorm(W_c c)) + b``
* eq. 5   ``ModMLP``                    ModLin, GELU, ModLin
* eqs. 6-8 ``ModAttn``                  per-function attention modulated by ``C_ui C_uj``
* eqs. 9-10 ``LOC``                     ModAttn + ModMLP with ``C_ui``-weighted residuals
* eq. 11  ``Interpreter`` / ``aggregate_streams``  ``y_i = x_i + sum_u C_ui LOCs_u(x)_i``
* eqs. 12-13 ``FunctionIteration``      type matching, then the interpreter
* eq. 14  ``Script``                    ``n_iterations`` function iterations with shared weights

The kernel is NAC's own (``nac.circuits.kernel.link_probabilities``: ``1 - cos``, truncation
with a straight-through gradient, a learnable bandwidth initialised at 1), as in the authors'
code. The paper's eq. 2 prints the truncation condition the wrong way round ("if d > tau"); the
authors' code, like NAC's kernel, cuts where ``d > tau`` (``C~ = 0``), so a function reads only
variables whose types lie near its signature, as the paper's text says.

Function signatures are frozen at their random initialisation by default (the authors' preset
detaches them; ``learn_signatures=True`` makes them parameters); codes are learned. Fine-tuning
(``NeuralInterpreter.finetune``) follows the authors' protocol: a new CLS token and head, and
optionally new functions, with the old parameters frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

import annotated_types as at
import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import model_validator

# The equation pieces (eqs. 2-11) live in ni_layers; re-exported here (the import path of record).
from nac.baselines.ni_layers import (
    EPS,
    LOC,
    Interpreter,
    ModAttn,
    ModLin,
    ModMLP,
    TypeInference,
    aggregate_streams,
    modulated_attention,
    normalize_compatibilities,
    per_function_linear,
    truncated_kernel,
)
from nac.circuits.tokenizers import build_tokenizer
from nac.config import ConfigDict, Tokenizer
from nac.fields import POSITIVE, POSITIVE_INT, Real, config

PRESET_TRUNCATION = 1.4202567871309753  # the authors' only preset (presets/digits.yml)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@config
class NeuralInterpreterConfig(ConfigDict):
    """What a checkpoint stores to rebuild a Neural Interpreter (plain JSON-able values).

    The authors' preset (32 px digits): tokenizer of 4x4 patches, ``d_model=192``,
    ``d_code=192``, ``d_type=24``, ``n_functions=5``, ``loc_layers=1``, ``heads=4`` x
    ``head_dim=32``, ``n_iterations=8``, ``n_scripts=1``, ``truncation=1.42...``; the defaults
    here are smaller (CPU-sized) except for the kernel's settings.

    ``n_cls_tokens`` and ``added_functions`` record what ``finetune`` added (CLS tokens; sizes of
    the appended function groups), so a fine-tuned model can be rebuilt from its config.
    """

    section = "neural_interpreter"
    variant: Literal["neural_interpreter"] = "neural_interpreter"
    num_classes: POSITIVE_INT = 10
    tokenizer: Tokenizer = field(default_factory=lambda: {"kind": "conv32", "dim": 64, "pos_dim": 16})
    d_model: POSITIVE_INT = 64
    d_type: POSITIVE_INT = 24
    d_code: POSITIVE_INT | None = None  # defaults to d_model (preset: code = dim = 192)
    n_functions: POSITIVE_INT = 5
    n_scripts: POSITIVE_INT = 1
    n_iterations: POSITIVE_INT = 2
    loc_layers: POSITIVE_INT = 1
    heads: POSITIVE_INT = 4
    head_dim: POSITIVE_INT | None = None  # query/key width per head; defaults to d_model // heads
    mlp_mult: POSITIVE = 2.0
    truncation: Annotated[Real, at.Gt(0), at.Le(2)] | None = PRESET_TRUNCATION  # a cosine distance
    bandwidth: POSITIVE = 1.0  # sigma of eq. 2 (initial value when learnable)
    learn_bandwidth: bool = True
    learn_signatures: bool = False  # the paper: signatures frozen at initialisation
    straight_through: bool = True  # truncated pairs get the untruncated gradient (as NAC)
    n_cls_tokens: POSITIVE_INT = 1
    added_functions: list[POSITIVE_INT] = field(default_factory=list)

    @model_validator(mode="after")
    def _rules(self):
        if self.d_code is None:
            self.d_code = self.d_model
        if self.head_dim is None:
            self.head_dim = max(1, self.d_model // self.heads)
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by heads={self.heads} (values are split over heads)"
            )
        return self

    @property
    def total_functions(self) -> int:
        return self.n_functions + sum(self.added_functions)


# ---------------------------------------------------------------------------------------------
# Functions f_u = (s_u, c_u)
# ---------------------------------------------------------------------------------------------
class FunctionGroup(nn.Module):
    """A group of functions ``f_u = (s_u, c_u)``: unit signatures ``[n, d_type]`` (a buffer,
    frozen at initialisation, unless ``learn_signatures``) and codes ``[n, d_code]``
    (parameters). Fine-tuning appends groups, so old functions can be frozen as a whole."""

    def __init__(self, n: int, d_type: int, d_code: int, learn_signatures: bool):
        super().__init__()
        sig = F.normalize(torch.randn(n, d_type), dim=-1)
        if learn_signatures:
            self.signatures = nn.Parameter(sig)
        else:
            self.register_buffer("signatures", sig)
        self.codes = nn.Parameter(torch.randn(n, d_code))


# ---------------------------------------------------------------------------------------------
# Eqs. 12-14: function iterations and scripts
# ---------------------------------------------------------------------------------------------
class Script(nn.Module):
    """Eq. 14, ``Script = FnIter o ... (n_iterations times) ... o FnIter``, with one set of weights
    (type inference, kernel bandwidth, functions, interpreter) shared by its iterations and not
    shared with other scripts.

    x: ``[B, V, d]`` -> ``[B, V, d]``.
    """

    def __init__(self, c: NeuralInterpreterConfig):
        super().__init__()
        self.n_iterations, self.truncation, self.straight_through = c.n_iterations, c.truncation, c.straight_through
        self.type_inference = TypeInference(c.d_model, c.d_type)
        bw = torch.tensor(float(c.bandwidth))
        if c.learn_bandwidth:
            self.bandwidth = nn.Parameter(bw)
        else:
            self.register_buffer("bandwidth", bw)
        self.functions = nn.ModuleList(
            FunctionGroup(n, c.d_type, c.d_code, c.learn_signatures) for n in [c.n_functions, *c.added_functions]
        )
        self.interpreter = Interpreter(
            c.d_model, c.d_code, c.loc_layers, c.heads, c.head_dim, max(1, int(round(c.d_model * c.mlp_mult)))
        )

    @property
    def signatures(self) -> torch.Tensor:
        """``[U, d_type]``, all groups."""
        return torch.cat([g.signatures for g in self.functions], dim=0)

    @property
    def codes(self) -> torch.Tensor:
        """``[U, d_code]``, all groups."""
        return torch.cat([g.codes for g in self.functions], dim=0)

    def type_matching(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 13 (with eqs. 2-3), ``C_uj = TypeMatching(s_u, x_j)``: ``[B, V, d]`` -> ``[B, U, V]``.
        The bandwidth is floored at 1e-3 (as NAC's): a step through 0 would flip the kernel."""
        types = self.type_inference(x)
        C_tilde = truncated_kernel(
            self.signatures, types, self.bandwidth.clamp_min(1e-3), self.truncation, self.straight_through
        )
        return normalize_compatibilities(C_tilde)

    def function_iteration(
        self, x: torch.Tensor, key_mask: torch.Tensor | None = None, record: list | None = None
    ) -> torch.Tensor:
        """Eq. 12, ``FnIter({x_j}_j) = Interpreter({x_j}_j, {c_u}_u, {C_uj}_{u,j})``."""
        C = self.type_matching(x)
        if record is not None:
            record.append(C)
        return self.interpreter(x, self.codes, C, key_mask)

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None = None, record: list | None = None
    ) -> torch.Tensor:
        for _ in range(self.n_iterations):
            x = self.function_iteration(x, key_mask, record)
        return x


# ---------------------------------------------------------------------------------------------
# Eq. 1: the model
# ---------------------------------------------------------------------------------------------
class ClassificationHead(nn.Module):
    """CLS-token read-out: LayerNorm + Linear, ``[B, d]`` -> ``[B, num_classes]``."""

    def __init__(self, d_model: int, num_classes: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.linear = nn.Linear(d_model, num_classes)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(cls))


class NeuralInterpreter(nn.Module):
    """Eq. 1, ``NeuralInterpreter = Script_ns o ... o Script_1``, behind NAC's interface:
    tokenizer (``nac.circuits.tokenizers``) -> linear embedding to ``d_model`` -> CLS tokens
    prepended -> scripts -> LayerNorm + Linear on the current CLS token (the last one).

    ``forward(inputs, mask=None, cond=None, cond_mask=None, design=None) -> [B, num_classes]``;
    mask ``[B, T]`` bool marks real tokens (an attention key mask); cond and design are ignored.
    """

    def __init__(self, config: NeuralInterpreterConfig):
        super().__init__()
        self.config = c = config
        self.tokenizer = build_tokenizer(c.tokenizer)
        self.embed = nn.Linear(self.tokenizer.d_out, c.d_model)
        # 1-d parameters (kept out of weight decay by the training loop's rule).
        self.cls_tokens = nn.ParameterList(nn.Parameter(torch.randn(c.d_model) * 0.02) for _ in range(c.n_cls_tokens))
        self.scripts = nn.ModuleList(Script(c) for _ in range(c.n_scripts))
        self.head = ClassificationHead(c.d_model, c.num_classes)

    # -- NAC's interface -----------------------------------------------------------------------
    def design(self, cond=None, cond_mask=None) -> None:
        return None

    def graph_regularizer(self, design=None) -> torch.Tensor:
        return torch.zeros(())

    def _variables(self, inputs, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tokens embedded with the CLS tokens in front: ``[B, n_cls + T, d]`` and key mask."""
        x = self.embed(self.tokenizer(inputs))
        B = x.shape[0]
        cls = torch.stack(list(self.cls_tokens), dim=0).unsqueeze(0).expand(B, -1, -1)
        x = torch.cat([cls.to(x.dtype), x], dim=1)
        if mask is not None:
            mask = mask.to(device=x.device, dtype=torch.bool)
            mask = torch.cat([mask.new_ones(B, cls.shape[1]), mask], dim=1)
        return x, mask

    def _run(self, inputs, mask=None, record: list | None = None) -> torch.Tensor:
        x, key_mask = self._variables(inputs, mask)
        for script in self.scripts:
            x = script(x, key_mask, record)
        return x

    def forward(self, inputs, mask=None, cond=None, cond_mask=None, design=None) -> torch.Tensor:
        x = self._run(inputs, mask)
        return self.head(x[:, len(self.cls_tokens) - 1])

    def routing(self, inputs, mask=None, script: int = 0, iteration: int = 0, include_cls: bool = True) -> torch.Tensor:
        """The compatibilities ``C`` (eq. 3) of one function iteration, as ``[B, V, U]``
        (variable-to-function routing). V = ``n_cls_tokens`` CLS tokens then the T input tokens
        (``include_cls=False`` drops the CLS rows: ``[B, T, U]``)."""
        record: list[torch.Tensor] = []
        self._run(inputs, mask, record)
        C = record[script * self.config.n_iterations + iteration].transpose(1, 2)
        return C if include_cls else C[:, len(self.cls_tokens) :]

    # -- the authors' fine-tuning protocol ----------------------------------------------------------
    def finetune(
        self, num_classes: int, num_new_functions: int = 0, freeze_existing: bool = True
    ) -> "NeuralInterpreter":
        """A new CLS token and a new head of ``num_classes``; optionally ``num_new_functions`` new
        functions appended to every script (random signatures, learnable codes). With
        ``freeze_existing`` every old parameter gets ``requires_grad=False``. The config is
        updated (``num_classes``, ``n_cls_tokens``, ``added_functions``) so the fine-tuned model
        can be rebuilt from it. Returns self."""
        c = self.config
        if num_new_functions < 0:
            raise ValueError(f"num_new_functions must be >= 0, got {num_new_functions}")
        if freeze_existing:
            for p in self.parameters():
                p.requires_grad_(False)
        ref = self.head.linear.weight
        self.cls_tokens.append(nn.Parameter(torch.randn(c.d_model, device=ref.device, dtype=ref.dtype) * 0.02))
        self.head = ClassificationHead(c.d_model, num_classes).to(device=ref.device, dtype=ref.dtype)
        if num_new_functions > 0:
            for script in self.scripts:
                script.functions.append(
                    FunctionGroup(num_new_functions, c.d_type, c.d_code, c.learn_signatures).to(
                        device=ref.device, dtype=ref.dtype
                    )
                )
        added = [*c.added_functions, int(num_new_functions)] if num_new_functions > 0 else list(c.added_functions)
        self.config = replace(c, num_classes=int(num_classes), n_cls_tokens=c.n_cls_tokens + 1, added_functions=added)
        return self


def build_neural_interpreter(config: NeuralInterpreterConfig | dict) -> NeuralInterpreter:
    """Build from a ``NeuralInterpreterConfig`` or its dict form (what a checkpoint stores)."""
    if isinstance(config, dict):
        config = NeuralInterpreterConfig.from_dict(config)
    return NeuralInterpreter(config)
