"""Stochastic Kernel Modulated Dot-Product Attention, SKMDPA (paper eq. 3).

``W_{i<-j} = softmax_j(A_{i<-j} + log K_hat_ij)`` with ``K_hat_ij = K_ij / (delta + sum_j K_ij)``
and ``A_{i<-j} = q_i . k_j / sqrt(d)``; ``y_i = sum_j W_{i<-j} v_j``.

Queries are ModFC projections of the receivers conditioned on the receivers' codes; keys and
values are ModFC projections of the senders conditioned on the senders' codes; an exit ModFC
(the authors' code) maps the heads back to the state width. One kernel ``K`` (a
``nac.circuits.kernel.Kernel``, which gives its ``log K_hat``) is shared by all heads. Passing
``K=None`` gives dense, all-to-all attention (the Perceiver IO and ``modfc``
rungs of the Table 1 ladder).

Note: ``log K_hat`` differs from ``log K`` by a per-row constant, and softmax is invariant to
per-row constants, so the normalisation in eq. 3 does not change ``W`` (except through the
``delta`` floor where a whole row of ``K`` is ~0). We implement eq. 3 as written anyway.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits.kernel import Kernel, cpu_shortcut
from nac.circuits.modfc import ModFC, ModFCForm


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(e) + bias) v``: what ``F.scaled_dot_product_attention`` computes.

    With a bias that needs a gradient (the kernel's, from the learnable signatures and bandwidth)
    PyTorch's CPU SDPA falls back to its math path, which adds a NaN-safe softmax (an all-row
    ``-inf`` scan and a ``where`` over ``[B, H, U, V]``) and slower strided products; written out
    it is cheaper forward + backward. The kernel bias never has an all ``-inf`` row
    (``log_normalized_kernel``), so the safe softmax buys nothing here. The bias is added in place
    to the product's output (the product's backward does not need it): the same numbers without
    allocating a second ``[B, H, U, V]`` buffer.
    q, k, v ``[B, H, U|V, e]``, bias broadcastable to ``[B, H, U, V]``."""
    scores = torch.matmul(q * (1.0 / math.sqrt(q.shape[-1])), k.transpose(-1, -2))
    return torch.matmul(scores.add_(bias).softmax(dim=-1), v)


def head_width(d: int, heads: int, head_dim: int | None) -> int:
    """The width of one attention head: ``head_dim`` when given (the authors' ``head_dim``: the inner
    width ``heads x head_dim`` may differ from the state width ``d``; q, k, v map ``d`` to it and the
    exit layer maps it back), else ``d / heads`` (which must divide)."""
    if head_dim is not None:
        return head_dim
    if d % heads:
        raise ValueError(
            f"state width {d} is not divisible by {heads} heads; choose heads that divide d_model or set model.head_dim"
        )
    return d // heads


class SKMDPA(nn.Module):
    """Multi-head SKMDPA between receivers ``[B, U, d]`` and senders ``[B, V, d]``.

    ``code_recv``: ``[(B,) U, d_code]``, ``code_send``: ``[(B,) V, d_code]`` (either may be a
    ``Modulations`` of its code for the ModFCs reading it, ``code_readers``);
    ``K``: a ``Kernel`` ``[(B,) U, V]`` over every sender (input latents included, the authors' kernel
    over the concatenated signatures) or ``None`` (dense); ``key_mask``: ``[B, V]`` bool, True =
    keep. Returns ``[B, U, d]``. ``head_dim``: one head's width (``head_width``; default ``d / heads``);
    ``qkv_bias``: biases on the query and value projections (the key's is always left out).

    ``cpu_shortcuts`` (keyword; default True): whether the CPU-only fast forms may be taken on the
    CPU (``nac.circuits.kernel.cpu_shortcut``): a kernel's bias on its linked entries only
    and ``explicit_attention``; False takes CUDA's forms (the dense bias, SDPA) on every device.
    Set by the owner at construction (``NAC(..., cpu_shortcuts=)``), kept as ``self.cpu_shortcuts``.
    """

    def __init__(
        self,
        *,
        d: int,
        d_code: int,
        heads: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        form: ModFCForm = ModFCForm(),
        delta: float = 1e-6,
        cpu_shortcuts: bool = True,
    ):
        super().__init__()
        self.heads, self.d_head, self.delta = heads, head_width(d, heads, head_dim), delta
        self.cpu_shortcuts = cpu_shortcuts
        inner = heads * self.d_head
        self.q = ModFC(d, inner, d_code, form=form, bias=qkv_bias)
        # No key bias even with ``qkv_bias``: it adds q_i . b_k to a whole row of scores, which softmax ignores.
        self.k = ModFC(d, inner, d_code, form=form, bias=False)
        self.v = ModFC(d, inner, d_code, form=form, bias=qkv_bias)
        self.out = ModFC(inner, d, d_code, form=form)  # the exit layer keeps its bias (authors' too)

    def code_readers(self) -> tuple[list[ModFC], list[ModFC]]:
        """The modulated ModFCs reading the receivers' codes (q, exit) and the senders' (k, v)."""
        recv, send = [self.q, self.out], [self.k, self.v]
        return [m for m in recv if m.modulated], [m for m in send if m.modulated]

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [B, U, H*e] -> [B, H, U, e]
        return x.unflatten(-1, (self.heads, self.d_head)).transpose(1, 2)

    def _qkv(self, x_recv, x_send, code_recv, code_send):
        return (
            self._split(self.q(x_recv, code_recv)),
            self._split(self.k(x_send, code_send)),
            self._split(self.v(x_send, code_send)),
        )

    def _bias(self, K: Kernel | None, key_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
        if K is not None and not isinstance(K, Kernel):
            raise TypeError(
                f"SKMDPA takes its kernel as a nac.circuits.kernel.Kernel or None, got {type(K).__name__}; "
                "wrap a tensor K [(B,) U, V] as Kernel(K)"
            )
        bias = None if K is None else K.attention_bias(self.delta, cpu_shortcuts=self.cpu_shortcuts)
        if key_mask is not None:
            pad = torch.zeros(key_mask.shape, device=key_mask.device).masked_fill(~key_mask, float("-inf"))
            pad = pad[:, None, None, :]
            bias = pad if bias is None else bias + pad
        return None if bias is None else bias.to(dtype)

    def forward(self, x_recv, x_send, code_recv, code_send, K=None, key_mask=None) -> torch.Tensor:
        q, k, v = self._qkv(x_recv, x_send, code_recv, code_send)
        y = self._attend(q, k, v, self._bias(K, key_mask, q.dtype), K, key_mask)
        return self.out(y.transpose(1, 2).flatten(2), code_recv)

    def _attend(self, q, k, v, bias, K, key_mask) -> torch.Tensor:
        """``softmax(q k^T / sqrt(e) + bias) v``, ``[B, H, U, e]``: SDPA (the CUDA path, whose fused
        kernels take a bias with a gradient themselves), or ``explicit_attention`` (the same
        numbers, ``tests/test_speed_equivalence.py``) on the CPU with a kernel and no key mask
        (``self.cpu_shortcuts``)."""
        if K is not None and key_mask is None and cpu_shortcut(q, self.cpu_shortcuts):
            return explicit_attention(q, k, v, bias)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    @torch.no_grad()
    def weights(self, x_recv, x_send, code_recv, code_send, K=None, key_mask=None) -> torch.Tensor:
        """The attention weights ``W_{i<-j}``, ``[B, H, U, V]``, computed explicitly (for
        analysis and for ranking Perceiver IO latents by the attention they receive)."""
        q, k, _ = self._qkv(x_recv, x_send, code_recv, code_send)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)
        bias = self._bias(K, key_mask, scores.dtype)
        return torch.softmax(scores if bias is None else scores + bias, dim=-1)
