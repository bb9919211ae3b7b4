"""The equation pieces of Neural Interpreters (Rahaman et al., NeurIPS 2021), eqs. 2-11: type
inference and the truncated kernel (eq. 2), compatibilities (eq. 3), ModLin (eq. 4), ModMLP
(eq. 5), ModAttn (eqs. 6-8), the line of code LOC (eqs. 9-10) and the interpreter's aggregation
over functions (eq. 11). The model (functions, scripts, CLS read-out, fine-tuning) is in
``nac.baselines.neural_interpreter``, which re-exports every name here.

Shapes: ``B`` batch, ``V`` variables, ``U`` functions, ``d`` = ``d_model``, ``H`` heads.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits.kernel import link_probabilities

EPS = 1e-6                                   # the paper's epsilon of eqs. 3 and 7


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
