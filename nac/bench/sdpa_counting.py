"""SDPA with a bias counted as CUDA runs it (``nac.bench.opcount``'s conventions): one fused
kernel each way, eager (``fused_sdpa``) and in a compiled region (``compiled_fused_sdpa``), where
the CPU decomposes it into its math path. The values and gradients are SDPA's own
(tests/test_loop_sync.py)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from nac.bench.opcount import Tracker


def fused_sdpa(t: Tracker, stack: ExitStack) -> None:
    """SDPA with a bias (``attn_mask``) counted as CUDA runs it: one fused kernel forward
    (``_scaled_dot_product_efficient_attention``, which takes a bias with a gradient) and one
    backward (its ``_backward``, the bias's gradient included). The CPU has no fused kernel for
    such a bias and decomposes it into its math path (~40 ops forward and backward, what the
    labels before ``after_batched_kernel`` counted for the NAC's attention); SDPA without a bias
    is one op each way on both (flash attention). The values are the CPU's SDPA's."""
    sdpa = F.scaled_dot_product_attention

    class FusedSDPA(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, bias, scale):
            t.ops[t.part()] += 1
            t.paused += 1
            try:
                out = sdpa(q, k, v, attn_mask=bias, scale=scale)
            finally:
                t.paused -= 1
            ctx.save_for_backward(q, k, v, bias)
            ctx.scale = scale
            return out

        @staticmethod
        def backward(ctx, grad):
            t.ops[t.part()] += 1
            t.paused += 1
            try:
                with torch.enable_grad():
                    ins = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
                    out = sdpa(*ins[:3], attn_mask=ins[3], scale=ctx.scale)
                    need = [x for x in ins if x.requires_grad]
                    got = iter(torch.autograd.grad(out, need, grad))
                return (*(next(got) if x.requires_grad else None for x in ins), None)
            finally:
                t.paused -= 1

    def counted(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if attn_mask is None or dropout_p or is_causal or kw or attn_mask.dtype == torch.bool:
            return sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        return FusedSDPA.apply(q, k, v, attn_mask, scale)

    F.scaled_dot_product_attention = counted
    stack.callback(setattr, F, "scaled_dot_product_attention", sdpa)


SDPA = F.scaled_dot_product_attention


@torch.library.custom_op("nac_bench::sdpa_bias", mutates_args=())
def _sdpa_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """SDPA with a bias as one opaque op: what the compiled column counts as CUDA's one
    ``_scaled_dot_product_efficient_attention`` (``compiled_fused_sdpa``)."""
    return SDPA(q, k, v, attn_mask=bias, scale=scale).contiguous()


@_sdpa_bias.register_fake
def _(q, k, v, bias, scale):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


@torch.library.custom_op("nac_bench::sdpa_bias_backward", mutates_args=())
def _sdpa_bias_backward(
    grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Its backward as one opaque op (CUDA's ``_scaled_dot_product_efficient_attention_backward``,
    the bias's gradient included)."""
    p = torch.softmax(q @ k.transpose(-2, -1) * scale + bias, dim=-1)  # (autograd is off inside an op)
    dp = grad @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ grad, ds


@_sdpa_bias_backward.register_fake
def _(grad, q, k, v, bias, scale):
    return tuple(x.new_empty(x.shape) for x in (q, k, v, bias))


def _sdpa_bias_setup(ctx, inputs, output):
    q, k, v, bias, scale = inputs
    ctx.save_for_backward(q, k, v, bias)
    ctx.scale = scale


def _sdpa_bias_grad(ctx, grad):
    return (*_sdpa_bias_backward(grad, *ctx.saved_tensors, ctx.scale), None)


_sdpa_bias.register_autograd(_sdpa_bias_grad, setup_context=_sdpa_bias_setup)


def compiled_fused_sdpa(stack: ExitStack) -> None:
    """``fused_sdpa``'s convention for the compiled column: SDPA with a float bias traced as one
    opaque op each way (an extern call in inductor's output code, as CUDA's fused kernel with a
    bias is), instead of the CPU's decomposition (matrix products, softmax and their backward:
    inductor on the CPU has no fused attention with a bias that has a gradient)."""

    def counted(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if attn_mask is None or dropout_p or is_causal or kw or attn_mask.dtype == torch.bool:
            return SDPA(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)
        scale = scale if scale is not None else q.shape[-1] ** -0.5
        return _sdpa_bias(q, k, v, attn_mask.expand(*q.shape[:-1], k.shape[-2]), scale)

    F.scaled_dot_product_attention = counted
    stack.callback(setattr, F, "scaled_dot_product_attention", SDPA)


__all__ = ["SDPA", "compiled_fused_sdpa", "fused_sdpa"]
