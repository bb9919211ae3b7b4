"""Neural Interpreters (Rahaman et al., NeurIPS 2021) as a baseline with NAC's model interface.

The module reads top to bottom like the paper's method section; every equation is one named
piece. Shapes: ``B`` batch, ``V`` variables (set elements: CLS tokens + input tokens), ``U``
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

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits.kernel import link_probabilities
from nac.circuits.tokenizers import TOKENIZERS, build_tokenizer
from nac.config import ConfigDict

EPS = 1e-6                                   # the paper's epsilon of eqs. 3 and 7
PRESET_TRUNCATION = 1.4202567871309753       # the authors' only preset (presets/digits.yml)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
@dataclass
class NeuralInterpreterConfig(ConfigDict):
    """What a checkpoint stores to rebuild a Neural Interpreter (plain JSON-able values).

    The authors' preset (32 px digits): tokenizer of 4x4 patches, ``d_model=192``,
    ``d_code=192``, ``d_type=24``, ``n_functions=5``, ``loc_layers=1``, ``heads=4`` x
    ``head_dim=32``, ``n_iterations=8``, ``n_scripts=1``, ``truncation=1.42...``; the defaults
    here are smaller (CPU-sized) except for the kernel's settings.

    ``n_cls_tokens`` and ``added_functions`` record what ``finetune`` added (CLS tokens; sizes of
    the appended function groups), so a fine-tuned model can be rebuilt from its config.
    """

    section = "neural interpreter config"
    variant: str = "neural_interpreter"
    num_classes: int = 10
    tokenizer: dict[str, Any] = field(default_factory=lambda: {"kind": "conv32", "dim": 64, "pos_dim": 16})
    d_model: int = 64
    d_type: int = 24
    d_code: int | None = None                # defaults to d_model (preset: code = dim = 192)
    n_functions: int = 5
    n_scripts: int = 1
    n_iterations: int = 2
    loc_layers: int = 1
    heads: int = 4
    head_dim: int | None = None              # query/key width per head; defaults to d_model // heads
    mlp_mult: float = 2.0
    truncation: float | None = PRESET_TRUNCATION
    bandwidth: float = 1.0                   # sigma of eq. 2 (initial value when learnable)
    learn_bandwidth: bool = True
    learn_signatures: bool = False           # the paper: signatures frozen at initialisation
    straight_through: bool = True            # truncated pairs get the untruncated gradient (as NAC)
    n_cls_tokens: int = 1
    added_functions: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.d_code is None:
            self.d_code = self.d_model
        if self.head_dim is None:
            self.head_dim = max(1, self.d_model // self.heads)
        self.added_functions = [int(n) for n in self.added_functions]
        self.validate()

    def validate(self) -> None:
        if self.variant != "neural_interpreter":
            raise ValueError(f"neural interpreter variant must be 'neural_interpreter', got {self.variant!r}")
        if self.tokenizer.get("kind") not in TOKENIZERS:
            raise ValueError(f"tokenizer.kind={self.tokenizer.get('kind')!r} is not a valid choice; "
                             f"valid choices: {', '.join(TOKENIZERS)}")
        for name in ("num_classes", "d_model", "d_type", "d_code", "n_functions", "n_scripts", "n_iterations",
                     "loc_layers", "heads", "head_dim", "n_cls_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"neural_interpreter.{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by heads={self.heads} (values are split over heads)")
        if not self.bandwidth > 0 or not self.mlp_mult > 0:
            raise ValueError(f"need bandwidth > 0 and mlp_mult > 0, got {self.bandwidth}, {self.mlp_mult}")
        if self.truncation is not None and not 0 < self.truncation <= 2:
            raise ValueError(f"truncation is a cosine distance in (0, 2] (or null), got {self.truncation}")
        if any(n < 1 for n in self.added_functions):
            raise ValueError(f"added_functions must hold positive group sizes, got {self.added_functions}")

    @property
    def total_functions(self) -> int:
        return self.n_functions + sum(self.added_functions)


# ---------------------------------------------------------------------------------------------
# Eq. 2: type inference and the truncated kernel; eq. 3: compatibilities
# ---------------------------------------------------------------------------------------------
class TypeInference(nn.Module):
    """Eq. 2, ``t_i = TypeInference(x_i)``: LayerNorm, then a GELU MLP of depth 2, projected onto
    the unit hypersphere of ``d_type`` dims (where the signatures live).

    x: ``[B, V, d]`` -> t: ``[B, V, d_type]`` with ``|t_i| = 1``.
    """

    def __init__(self, d_model: int, d_type: int, hidden: int | None = None):
        super().__init__()
        hidden = hidden or d_model
        self.norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_type))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.mlp(self.norm(x)), dim=-1)


def truncated_kernel(signatures: torch.Tensor, types: torch.Tensor, bandwidth: torch.Tensor | float,
                     truncation: float | None, straight_through: bool = True) -> torch.Tensor:
    """Eq. 2, ``C~_ui = exp(-d_T(s_u, t_i) / sigma)`` with ``d_T = 1 - s_u . t_i``, and ``0`` where
    ``d_T > tau`` (truncation): NAC's kernel, ``nac.circuits.kernel.link_probabilities``.

    signatures: ``[U, d_type]``; types: ``[B, V, d_type]`` -> ``[B, U, V]``.
    """
    return link_probabilities(signatures, types, bandwidth=bandwidth, truncation=truncation,
                              straight_through=straight_through)


def normalize_compatibilities(C_tilde: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Eq. 3, ``C_ui = C~_ui / (eps + sum_u C~_ui)``: normalised over functions, no softmax.

    ``[B, U, V]`` -> ``[B, U, V]``; a variable no function accepts keeps ``C_ui = 0`` for all u.
    """
    return C_tilde / (eps + C_tilde.sum(dim=-2, keepdim=True))


# ---------------------------------------------------------------------------------------------
# Eqs. 4-5: ModLin and ModMLP
# ---------------------------------------------------------------------------------------------
class ModLin(nn.Module):
    """Eq. 4, ``ModLin(x; c) = W (x * LayerNorm(W_c c)) + b``.

    x: ``[..., U, V, d_in]`` with c: ``[..., U, d_cond]`` (one code per function stream; the
    modulation is broadcast over the V variables) -> ``[..., U, V, d_out]``. A single code
    ``[d_cond]`` with x ``[..., V, d_in]`` also works.
    """

    def __init__(self, d_in: int, d_out: int, d_cond: int, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out, bias=bias)       # W, b
        self.cond = nn.Linear(d_cond, d_in, bias=False)       # W_c
        self.cond_norm = nn.LayerNorm(d_in)

    def modulation(self, c: torch.Tensor) -> torch.Tensor:
        """``LayerNorm(W_c c)``: ``[..., d_cond]`` -> ``[..., d_in]``."""
        return self.cond_norm(self.cond(c))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.modulation(c).unsqueeze(-2))


class ModMLP(nn.Module):
    """Eq. 5, ``ModMLP(x; c) = ModLin_2(GELU(ModLin_1(x; c)); c)`` (depth L = 2, one code).

    x: ``[B, U, V, d]``, c: ``[U, d_code]`` -> ``[B, U, V, d]``.
    """

    def __init__(self, d_model: int, d_code: int, hidden: int):
        super().__init__()
        self.fc1 = ModLin(d_model, hidden, d_code)
        self.fc2 = ModLin(hidden, d_model, d_code)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x, c)), c)


# ---------------------------------------------------------------------------------------------
# Eqs. 6-8: ModAttn
# ---------------------------------------------------------------------------------------------
def modulated_attention_weights(q: torch.Tensor, k: torch.Tensor, C: torch.Tensor,
                                key_mask: torch.Tensor | None = None, eps: float = EPS) -> torch.Tensor:
    """Eq. 7, ``W_uhij = W~_uhij / (eps + sum_j W~_uhij)`` with
    ``W~_uhij = C_ui C_uj softmax_j(q_uhi . k_uhj / sqrt(d_key))``.

    q, k: ``[B, U, V, H, d_key]``; C: ``[B, U, V]``; key_mask: ``[B, V]`` bool (True = real
    token; padded keys get weight 0) -> ``[B, U, H, V_i, V_j]``.
    """
    logits = torch.einsum("buihe,bujhe->buhij", q, k) / math.sqrt(q.shape[-1])
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask[:, None, None, None, :], float("-inf"))
    A = logits.softmax(dim=-1)
    W = C[:, :, None, :, None] * C[:, :, None, None, :] * A
    return W / (eps + W.sum(dim=-1, keepdim=True))


class ModAttn(nn.Module):
    """Eqs. 6-8: per-function self-attention whose queries, keys and values are ModLins of the
    function's code (eq. 6), whose weights are modulated by ``C_ui C_uj`` and renormalised over
    j (eq. 7), and whose heads are folded into channels and mixed by a last ModLin (eq. 8).

    x: ``[B, U, V, d]`` (one stream per function), c: ``[U, d_code]``, C: ``[B, U, V]`` ->
    ``[B, U, V, d]``.
    """

    def __init__(self, d_model: int, d_code: int, heads: int, head_dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.query = ModLin(d_model, heads * head_dim, d_code)
        self.key = ModLin(d_model, heads * head_dim, d_code)
        self.value = ModLin(d_model, d_model, d_code)
        self.out = ModLin(d_model, d_model, d_code)

    def forward(self, x: torch.Tensor, c: torch.Tensor, C: torch.Tensor,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        H = self.heads
        q = self.query(x, c).unflatten(-1, (H, -1))                      # eq. 6: [B, U, V, H, d_key]
        k = self.key(x, c).unflatten(-1, (H, -1))
        v = self.value(x, c).unflatten(-1, (H, -1))                      # [B, U, V, H, d / H]
        W = modulated_attention_weights(q, k, C, key_mask)               # eq. 7: [B, U, H, V, V]
        y = torch.einsum("buhij,bujhe->buihe", W, v).flatten(-2)         # eq. 8: heads folded
        return self.out(y, c)


# ---------------------------------------------------------------------------------------------
# Eqs. 9-10: the line of code (LOC)
# ---------------------------------------------------------------------------------------------
class LOC(nn.Module):
    """Eqs. 9-10, one line of code applied in U parallel streams:

    ``a_ui = x_ui + C_ui ModAttn({LayerNorm(x_uj)}_j; c_u, {C_uj}_j)_i``   (eq. 9)
    ``y_ui = a_ui + C_ui ModMLP(LayerNorm(a_ui); c_u)``                      (eq. 10)

    so ``y_ui = x_ui`` where ``C_ui = 0``. x: ``[B, U, V, d]``, c: ``[U, d_code]``, C:
    ``[B, U, V]`` -> ``[B, U, V, d]``.
    """

    def __init__(self, d_model: int, d_code: int, heads: int, head_dim: int, mlp_hidden: int):
        super().__init__()
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = ModAttn(d_model, d_code, heads, head_dim)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = ModMLP(d_model, d_code, mlp_hidden)

    def forward(self, x: torch.Tensor, c: torch.Tensor, C: torch.Tensor,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        gate = C.unsqueeze(-1)
        a = x + gate * self.attn(self.attn_norm(x), c, C, key_mask)     # eq. 9
        return a + gate * self.mlp(self.mlp_norm(a), c)                 # eq. 10


# ---------------------------------------------------------------------------------------------
# Eq. 11: the interpreter
# ---------------------------------------------------------------------------------------------
def aggregate_streams(x: torch.Tensor, streams: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Eq. 11's aggregation, ``y_i = x_i + sum_u C_ui s_ui``.

    x: ``[B, V, d]``; streams (the LOC stack's outputs): ``[B, U, V, d]``; C: ``[B, U, V]``
    -> ``[B, V, d]``. ``y_i = x_i`` where no function accepts ``x_i``.
    """
    return x + torch.einsum("buv,buvd->bvd", C, streams)


class Interpreter(nn.Module):
    """Eq. 11, ``y_i = x_i + sum_u C_ui (LOC_nl o ... o LOC_1)({x_j}_j; c_u, {C_uj}_j)_i``: the
    input is broadcast to one stream per function (``x_ui = x_i``), each stream runs the shared
    LOC stack under its function's code, and the streams are summed with weights ``C_ui``.

    x: ``[B, V, d]``, codes: ``[U, d_code]``, C: ``[B, U, V]`` -> ``[B, V, d]``.
    """

    def __init__(self, d_model: int, d_code: int, loc_layers: int, heads: int, head_dim: int, mlp_hidden: int):
        super().__init__()
        self.locs = nn.ModuleList(LOC(d_model, d_code, heads, head_dim, mlp_hidden) for _ in range(loc_layers))

    def forward(self, x: torch.Tensor, codes: torch.Tensor, C: torch.Tensor,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
        streams = x.unsqueeze(1).expand(-1, codes.shape[0], -1, -1)      # x_ui = x_i: [B, U, V, d]
        for loc in self.locs:
            streams = loc(streams, codes, C, key_mask)
        return aggregate_streams(x, streams, C)


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
        self.functions = nn.ModuleList(FunctionGroup(n, c.d_type, c.d_code, c.learn_signatures)
                                       for n in [c.n_functions, *c.added_functions])
        self.interpreter = Interpreter(c.d_model, c.d_code, c.loc_layers, c.heads, c.head_dim,
                                       max(1, int(round(c.d_model * c.mlp_mult))))

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
        C_tilde = truncated_kernel(self.signatures, types, self.bandwidth.clamp_min(1e-3), self.truncation,
                                   self.straight_through)
        return normalize_compatibilities(C_tilde)

    def function_iteration(self, x: torch.Tensor, key_mask: torch.Tensor | None = None,
                           record: list | None = None) -> torch.Tensor:
        """Eq. 12, ``FnIter({x_j}_j) = Interpreter({x_j}_j, {c_u}_u, {C_uj}_{u,j})``."""
        C = self.type_matching(x)
        if record is not None:
            record.append(C)
        return self.interpreter(x, self.codes, C, key_mask)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None, record: list | None = None) -> torch.Tensor:
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

    def routing(self, inputs, mask=None, script: int = 0, iteration: int = 0,
                include_cls: bool = True) -> torch.Tensor:
        """The compatibilities ``C`` (eq. 3) of one function iteration, as ``[B, V, U]``
        (variable-to-function routing). V = ``n_cls_tokens`` CLS tokens then the T input tokens
        (``include_cls=False`` drops the CLS rows: ``[B, T, U]``)."""
        record: list[torch.Tensor] = []
        self._run(inputs, mask, record)
        C = record[script * self.config.n_iterations + iteration].transpose(1, 2)
        return C if include_cls else C[:, len(self.cls_tokens):]

    # -- the authors' fine-tuning protocol ----------------------------------------------------------
    def finetune(self, num_classes: int, num_new_functions: int = 0, freeze_existing: bool = True) -> "NeuralInterpreter":
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
                script.functions.append(FunctionGroup(num_new_functions, c.d_type, c.d_code, c.learn_signatures)
                                        .to(device=ref.device, dtype=ref.dtype))
        added = [*c.added_functions, int(num_new_functions)] if num_new_functions > 0 else list(c.added_functions)
        self.config = replace(c, num_classes=int(num_classes), n_cls_tokens=c.n_cls_tokens + 1, added_functions=added)
        return self


def build_neural_interpreter(config: NeuralInterpreterConfig | dict) -> NeuralInterpreter:
    """Build from a ``NeuralInterpreterConfig`` or its dict form (what a checkpoint stores)."""
    if isinstance(config, dict):
        config = NeuralInterpreterConfig.from_dict(config)
    return NeuralInterpreter(config)
