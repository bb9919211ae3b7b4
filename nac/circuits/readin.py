"""Read-in (paper eqs. 4-5): every processor module attends to the input tokens with its own
ModFC-conditioned query, keys and values.

Direct form (eq. 4): ``k_uj = W_k (x_j * m^k_u) + b_k`` for every module u and token j costs
``U x T x d_in x d`` and stores ``[B, U, T, d]``. Because a ModFC is a per-module diagonal
rescaling followed by one shared matrix, the same numbers come out of a cheaper route:

- scores:  ``q_u . k_uj = ((W_k^T q_u) * m^k_u) . x_j + q_u . b_k``; the last term is constant
  over j and softmax ignores it, so each head attends with the folded query
  ``q~_u = (W_k^h^T q_u^h) * m^k_u`` directly onto the (normalised) tokens ``x_j`` (the key
  projection has no bias for that reason);
- values:  ``sum_j a_uj v_uj = W_v ((sum_j a_uj x_j) * m^v_u) + b_v`` since ``sum_j a_uj = 1``.

So the fast path attends over raw tokens (``[B, H, U, T]`` scores, ``[B, H, U, d_in]``
summaries) and never materialises per-module keys or values. The per-module form (eq. 4
literally) is the reference, in ``nac/testing/reference_forms.py`` (``direct_attend``); tests assert
both agree (outputs and gradients).

Eq. 5 as printed has no softmax over tokens; we use softmax attention (the authors' code, and
what "cross-attention" means), and pre-LayerNorm residuals around attention and ModFFN.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from nac.circuits.attention import head_width
from nac.circuits.modfc import ModFC, ModFCForm, ModFFN


class ReadIn(nn.Module):
    """tokens ``[B, T, d_in]``, states ``[(B,) U, d]``, codes ``[(B,) U, d_code]`` (or ``None``
    when unmodulated, or a ``Modulations`` of them for every ModFC here), mask ``[B, T]`` bool
    (True = real token). Returns ``[B, U, d]``. ``head_dim`` and ``qkv_bias`` as ``SKMDPA``'s."""

    def __init__(
        self,
        *,
        d_in: int,
        d: int,
        d_code: int,
        heads: int = 1,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        ffn_mult: float = 4.0,
        gated: bool = False,
        form: ModFCForm = ModFCForm(),
    ):
        super().__init__()
        self.heads, self.d_head = heads, head_width(d, heads, head_dim)
        inner = heads * self.d_head
        self.norm_tokens = nn.LayerNorm(d_in)
        self.norm_states = nn.LayerNorm(d)
        self.q = ModFC(d, inner, d_code, form=form, bias=qkv_bias)
        # A key bias adds q_u . b_k to every score of row u: softmax ignores it, so it is left out.
        self.k = ModFC(d_in, inner, d_code, form=form, bias=False)
        self.v = ModFC(d_in, inner, d_code, form=form, bias=qkv_bias)
        self.out = ModFC(inner, d, d_code, form=form)
        self.norm_ffn = nn.LayerNorm(d)
        self.ffn = ModFFN(d=d, d_code=d_code, ffn_mult=ffn_mult, gated=gated, form=form)

    def forward(self, tokens, states, codes, mask=None) -> torch.Tensor:
        B = tokens.shape[0]
        states = states.expand(B, *states.shape[-2:])
        x = self.norm_tokens(tokens)
        h = self.norm_states(states)
        states = states + self.out(self.attend(x, h, codes, mask), codes)
        return states + self.ffn(self.norm_ffn(states), codes)

    def _modulation(self, fc: ModFC, codes, B: int, U: int) -> torch.Tensor | None:
        if not fc.modulated:
            return None
        return fc.modulation_of(codes).expand(B, U, fc.d_in)

    def attend(self, x, h, codes, mask=None) -> torch.Tensor:
        """x ``[B, T, d_in]`` (normalised tokens), h ``[B, U, d]`` (normalised states) -> ``[B, U, d]``
        (before the exit ModFC): the folded route of the module docstring."""
        B, U, H, e = h.shape[0], h.shape[1], self.heads, self.d_head
        q = self.q(h, codes).unflatten(-1, (H, e))  # [B, U, H, e]
        Wk = self.k.linear.weight.unflatten(0, (H, e))  # [H, e, d_in]
        q_fold = torch.einsum("buhe,hed->bhud", q, Wk)  # [B, H, U, d_in]
        mk = self._modulation(self.k, codes, B, U)
        if mk is not None:
            q_fold = q_fold * mk.unsqueeze(1)
        bias = None
        if mask is not None:
            bias = torch.zeros(mask.shape, device=x.device, dtype=q_fold.dtype).masked_fill(~mask, float("-inf"))[
                :, None, None, :
            ]
        xs = x.unsqueeze(1).expand(B, H, *x.shape[1:])
        summary = F.scaled_dot_product_attention(
            q_fold, xs, xs, attn_mask=bias, scale=1.0 / math.sqrt(e)
        )  # [B, H, U, d_in]
        mv = self._modulation(self.v, codes, B, U)
        if mv is not None:
            summary = summary * mv.unsqueeze(1)
        Wv = self.v.linear.weight.unflatten(0, (H, e))  # [H, e, d_in]
        y = torch.einsum("bhud,hed->buhe", summary, Wv)
        if self.v.linear.bias is not None:
            y = y + self.v.linear.bias.unflatten(0, (H, e))
        return y.flatten(2)
