"""The equation pieces of Neural Interpreters (Rahaman et al., NeurIPS 2021), eqs. 2-11: type
inference and the truncated kernel (eq. 2), compatibilities (eq. 3), ModLin (eq. 4), ModMLP
(eq. 5), ModAttn (eqs. 6-8), the line of code LOC (eqs. 9-10) and the interpreter's aggregation
over functions (eq. 11). The model (functions, scripts, CLS read-out, fine-tuning) is in
``nac.baselines.neural_interpreter``, which re-exports every name here.

Shapes: ``B`` batch, ``V`` variables, ``U`` functions, ``d`` = ``d_model``, ``H`` heads.

Speed: ``ModLin``, ``ModAttn`` and ``LOC`` compute the same equations in fewer, larger kernels than
as printed; the printed forms are the reference, in ``nac/testing/reference_forms.py`` (``plain_ni``).
The fast forms: ModLin folds the modulation into a per-function
weight (``W diag(m_u)``, one batched matmul, no ``x * m_u`` tensor); ModAttn projects q, k, v in
one matmul, and a stream that is one input broadcast over the functions (the first LOC's input,
``x_ui = x_i``) is normalised once and projected by one GEMM for all functions; eqs. 7-8 become
``y_i = C_i (A (C v))_i / (eps + C_i (A C)_i)`` with ``A`` the softmax (the ``[B, U, H, V, V]``
weights ``W`` are never formed). Equal up to float rounding, outputs and gradients:
tests/test_speed_equivalence.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits.kernel import link_probabilities

EPS = 1e-6  # the paper's epsilon of eqs. 3 and 7


def _broadcast_source(x: torch.Tensor) -> torch.Tensor | None:
    """``x[:, 0]`` when ``x`` ``[B, U, V, d]`` is one ``[B, V, d]`` tensor broadcast over U (a
    stride-0 expand, as the interpreter's ``x_ui = x_i``), else None."""
    return x[:, 0] if x.dim() == 4 and x.shape[1] > 1 and x.stride(1) == 0 else None


def per_function_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x @ w^T + b`` with one weight per function: x ``[B, U, V, d_in]``, w ``[U, d_out, d_in]``
    (or one ``[d_out, d_in]``, or any broadcastable batch) -> ``[B, U, V, d_out]``. A broadcast x
    is one GEMM against all functions' weights; a full x one bmm over functions (rows ``B*V``)."""
    if w.dim() == 2:
        return F.linear(x, w, b)
    if w.dim() == 3 and x.dim() == 4 and x.shape[1] == w.shape[0]:
        U, d_out = w.shape[:2]
        src = _broadcast_source(x)
        if src is not None:  # [B, V, U * d_out]
            y = F.linear(src, w.flatten(0, 1), None if b is None else b.repeat(U))
            return y.unflatten(-1, (U, d_out)).transpose(1, 2)
        B, _, V, d_in = x.shape
        xu = x.transpose(0, 1).reshape(U, B * V, d_in)
        y = torch.bmm(xu, w.mT) if b is None else torch.baddbmm(b, xu, w.mT)
        return y.view(U, B, V, d_out).transpose(0, 1)
    y = torch.matmul(x, w.mT)
    return y if b is None else y + b


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


def truncated_kernel(
    signatures: torch.Tensor,
    types: torch.Tensor,
    bandwidth: torch.Tensor | float,
    truncation: float | None,
    straight_through: bool = True,
) -> torch.Tensor:
    """Eq. 2, ``C~_ui = exp(-d_T(s_u, t_i) / sigma)`` with ``d_T = 1 - s_u . t_i``, and ``0`` where
    ``d_T > tau`` (truncation): NAC's kernel, ``nac.circuits.kernel.link_probabilities``.

    signatures: ``[U, d_type]``; types: ``[B, V, d_type]`` -> ``[B, U, V]``.
    """
    return link_probabilities(
        signatures, types, bandwidth=bandwidth, truncation=truncation, straight_through=straight_through
    )


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
        self.linear = nn.Linear(d_in, d_out, bias=bias)  # W, b
        self.cond = nn.Linear(d_cond, d_in, bias=False)  # W_c
        self.cond_norm = nn.LayerNorm(d_in)

    def modulation(self, c: torch.Tensor) -> torch.Tensor:
        """``LayerNorm(W_c c)``: ``[..., d_cond]`` -> ``[..., d_in]``."""
        return self.cond_norm(self.cond(c))

    def weight(self, c: torch.Tensor) -> torch.Tensor:
        """``W diag(LayerNorm(W_c c))``, the modulation folded in: ``[..., d_out, d_in]``."""
        return self.linear.weight * self.modulation(c).unsqueeze(-2)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return per_function_linear(x, self.weight(c), self.linear.bias)


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
def modulated_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    C: torch.Tensor,
    key_mask: torch.Tensor | None = None,
    eps: float = EPS,
) -> torch.Tensor:
    """Eqs. 7-8 without forming ``W``: ``y_i = sum_j W_ij v_j = C_i (A (C v))_i / (eps + C_i
    (A C)_i)`` with ``A = softmax_j(q_i . k_j / sqrt(d_key))`` (``C_i`` factors out of eq. 7's
    sum over j); ``A`` multiplies ``[C_j v_j, C_j]`` in one matmul.

    q, k: ``[B, U, H, V, d_key]``; v: ``[B, U, H, V, e]``; C: ``[B, U, V]`` -> ``[B, U, H, V, e]``.
    """
    *batch, V, d_key = q.shape  # the scale inside the GEMM
    logits = torch.baddbmm(
        q.new_zeros(()).expand(math.prod(batch), V, k.shape[-2]),
        q.reshape(-1, V, d_key),
        k.reshape(-1, *k.shape[-2:]).mT,
        beta=0,
        alpha=1 / math.sqrt(d_key),
    ).view(*batch, V, -1)
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask[:, None, None, None, :], float("-inf"))
    Cv = C[:, :, None, :, None]  # C_j (and C_i): [B, U, 1, V, 1]
    o = logits.softmax(dim=-1) @ torch.cat([v * Cv, Cv.expand(*v.shape[:-1], 1)], dim=-1)
    return o[..., :-1] * (Cv / (eps + Cv * o[..., -1:]))


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

    def forward(
        self, x: torch.Tensor, c: torch.Tensor, C: torch.Tensor, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        H = self.heads
        qkv = (self.query, self.key, self.value)  # eq. 6 in one projection
        b = None if any(m.linear.bias is None for m in qkv) else torch.cat([m.linear.bias for m in qkv])
        y = per_function_linear(x, torch.cat([m.weight(c) for m in qkv], dim=-2), b)
        q, k, v = (
            t.unflatten(-1, (H, -1)).transpose(-2, -3)  # [B, U, H, V, .]
            for t in y.split([m.linear.out_features for m in qkv], dim=-1)
        )
        y = modulated_attention(q, k, v, C, key_mask)  # eqs. 7-8: [B, U, H, V, d / H]
        return self.out(y.transpose(-2, -3).flatten(-2), c)  # heads folded into channels


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

    def forward(
        self, x: torch.Tensor, c: torch.Tensor, C: torch.Tensor, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        gate = C.unsqueeze(-1)
        src = _broadcast_source(x)
        h = self.attn_norm(x) if src is None else self.attn_norm(src).unsqueeze(1).expand_as(x)  # once if x_ui = x_i
        a = x + gate * self.attn(h, c, C, key_mask)  # eq. 9
        return a + gate * self.mlp(self.mlp_norm(a), c)  # eq. 10


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

    def forward(
        self, x: torch.Tensor, codes: torch.Tensor, C: torch.Tensor, key_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        streams = x.unsqueeze(1).expand(-1, codes.shape[0], -1, -1)  # x_ui = x_i: [B, U, V, d]
        for loc in self.locs:
            streams = loc(streams, codes, C, key_mask)
        return aggregate_streams(x, streams, C)
