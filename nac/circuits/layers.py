"""Propagator layers and the read-out (paper section 2.1)."""

from __future__ import annotations

import torch
import torch.nn as nn

from nac.circuits.attention import SKMDPA
from nac.circuits.modfc import ModFCForm, ModFFN

# timm's blocks are imported on use, where a model is built: importing timm loads torchvision (and
# torch._dynamo), ~2.2 s after torch that a stage building no model (validate, report) would pay for nothing.


def make_drop_path(p: float) -> nn.Module:
    """Stochastic depth: drop a residual branch ``[B, ...]`` for whole samples with probability
    ``p`` (timm's ``DropPath``: the mask is one ``bernoulli_(1 - p)`` draw on ``[B, 1, ...]``, kept
    samples scaled by ``1 / (1 - p)``; tests/test_library_blocks.py)."""
    from timm.layers import DropPath  # deferred: timm ~2.2 s after torch (above)

    return DropPath(p)


def make_layer_scale(d: int, init: float | None) -> nn.Module:
    """Per-channel residual gain ``gamma`` ``[d]`` on ``[..., d]``, initialised to ``init``, as in the
    authors' code (timm's ``LayerScale``); ``init=None``: no gain (``nn.Identity``, no parameter)."""
    from timm.layers import LayerScale  # deferred: timm ~2.2 s after torch (above)

    return nn.Identity() if init is None else LayerScale(d, float(init))


def register_bandwidth(module: nn.Module, bandwidth: float | None, learnable: bool = True) -> None:
    """The kernel bandwidth ``eps`` of eq. 2 owned by an attention module (the authors keep one
    kernel per attention module): a 0-d ``Parameter`` (learnable) or buffer named ``bandwidth``;
    nothing when ``bandwidth`` is None (a dense model, or one shared bandwidth on the NAC)."""
    if bandwidth is None:
        return
    bw = torch.tensor(float(bandwidth))
    if learnable:
        module.bandwidth = nn.Parameter(bw)
    else:
        module.register_buffer("bandwidth", bw)


def cat_modules(first: torch.Tensor | None, second: torch.Tensor | None) -> torch.Tensor | None:
    """Concatenate two module sets ``[(B,) N, k]`` and ``[(B,) U, k]`` along the module axis
    (``[(B,) N + U, k]``), expanding an unbatched one to the other's batch; ``None`` when both are
    ``None`` (unmodulated codes)."""
    if first is None and second is None:
        return None
    if first.dim() != second.dim():
        B = first.shape[0] if first.dim() == 3 else second.shape[0]
        first, second = (x.expand(B, *x.shape[-2:]) for x in (first, second))
    return torch.cat([first, second], dim=-2)


class Propagator(nn.Module):
    """One round of communication (SKMDPA among processor modules) then computation (ModFFN),
    each a pre-LayerNorm residual branch. states ``[B, U, d]``, codes ``[(B,) U, d_code]`` (or a
    ``Modulations`` of them for the ModFCs of ``code_readers``), K a ``Kernel`` ``[(B,) U, U]`` or
    ``None`` (dense). Returns ``[B, U, d]``. ``bandwidth``: this layer's own kernel bandwidth
    (``register_bandwidth``), or None.

    ``latents`` ``[B, N, d]`` with ``latent_codes`` ``[N, d_code]`` (or ``None``): the input latents
    (``ModelConfig.input_latents``), senders only (the authors' ``LatentGraph``): the processors
    attend to ``[latents; processors]``, ``K`` is then ``[(B,) U, N + U]`` (the kernel of the
    concatenated signatures: the latents' links are gated like the processors'), the same
    pre-LayerNorm on every sender; the latents themselves are not updated. ``send_codes``: the
    senders' codes ``[latent_codes; codes]`` when the caller has them already (once per forward).
    ``cpu_shortcuts`` (keyword): the attention's (``SKMDPA``)."""

    def __init__(
        self,
        *,
        d: int,
        d_code: int,
        heads: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        ffn_mult: float = 4.0,
        gated: bool = False,
        form: ModFCForm = ModFCForm(),
        drop_path: float = 0.0,
        layer_scale: float | None = None,
        delta: float = 1e-6,
        bandwidth: float | None = None,
        learn_bandwidth: bool = True,
        cpu_shortcuts: bool = True,
    ):
        super().__init__()
        register_bandwidth(self, bandwidth, learn_bandwidth)
        self.norm_attn = nn.LayerNorm(d)
        widths = dict(heads=heads, head_dim=head_dim, qkv_bias=qkv_bias)
        self.attn = SKMDPA(d=d, d_code=d_code, form=form, delta=delta, cpu_shortcuts=cpu_shortcuts, **widths)
        self.norm_ffn = nn.LayerNorm(d)
        self.ffn = ModFFN(d=d, d_code=d_code, ffn_mult=ffn_mult, gated=gated, form=form)
        self.scale_attn, self.scale_ffn = make_layer_scale(d, layer_scale), make_layer_scale(d, layer_scale)
        self.drop_path = make_drop_path(drop_path)

    def code_readers(self) -> tuple[list, list]:
        """The modulated ModFCs reading the receivers' codes (attention q and exit, ModFFN) and the
        senders' (attention k, v): what ``NAC.code_modulations`` computes together."""
        recv, send = self.attn.code_readers()
        return recv + [m for m in (self.ffn.fc1, self.ffn.fc2) if m.modulated], send

    def forward(self, states, codes, K=None, latents=None, latent_codes=None, send_codes=None) -> torch.Tensor:
        h = self.norm_attn(states)
        if latents is None:
            states = states + self.drop_path(self.scale_attn(self.attn(h, h, codes, codes, K)))
        else:
            send = torch.cat([self.norm_attn(latents), h], dim=1)
            send_codes = cat_modules(latent_codes, codes) if send_codes is None else send_codes
            a = self.attn(h, send, codes, send_codes, K)
            states = states + self.drop_path(self.scale_attn(a))
        return states + self.drop_path(self.scale_ffn(self.ffn(self.norm_ffn(states), codes)))


class ReadOut(nn.Module):
    """Read-out modules poll the final processor states through SKMDPA cross-attention, then a
    ModFFN; each read-out module emits class logits and a confidence score, and the logits are
    the confidence-weighted sum (softmax over read-out modules, as in the authors' pooling).

    The authors' pooling configs (the default): no residual around the read-out attention
    (``residual=False``: the read-out states are the attention's output), LayerScale
    ``layer_scale`` on both branches, and the pooling scores each module's raw state
    (``norm=False``). ``nac`` v1: ``residual=True, norm=True, layer_scale=None``.

    readout_states ``[(B,) U_o, d]``, processor_states ``[B, U_p, d]``, codes as SKMDPA,
    K a ``Kernel`` ``[(B,) U_o, U_p]`` or ``None``. Returns logits ``[B, num_classes]``. With input latents the
    senders are ``[latents; processors]`` and ``K`` covers them all, ``[(B,) U_o, N + U_p]``.
    ``cpu_shortcuts`` (keyword): the attention's (``SKMDPA``).
    """

    def __init__(
        self,
        *,
        d: int,
        d_code: int,
        heads: int,
        num_classes: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        ffn_mult: float = 4.0,
        gated: bool = False,
        form: ModFCForm = ModFCForm(),
        delta: float = 1e-6,
        residual: bool = False,
        norm: bool = False,
        layer_scale: float | None = 0.1,
        bandwidth: float | None = None,
        learn_bandwidth: bool = True,
        cpu_shortcuts: bool = True,
    ):
        super().__init__()
        register_bandwidth(self, bandwidth, learn_bandwidth)
        self.residual = residual
        self.norm_recv, self.norm_send = nn.LayerNorm(d), nn.LayerNorm(d)
        widths = dict(heads=heads, head_dim=head_dim, qkv_bias=qkv_bias)
        self.attn = SKMDPA(d=d, d_code=d_code, form=form, delta=delta, cpu_shortcuts=cpu_shortcuts, **widths)
        self.norm_ffn = nn.LayerNorm(d)
        self.ffn = ModFFN(d=d, d_code=d_code, ffn_mult=ffn_mult, gated=gated, form=form)
        self.scale_attn, self.scale_ffn = make_layer_scale(d, layer_scale), make_layer_scale(d, layer_scale)
        self.norm_out = nn.LayerNorm(d) if norm else nn.Identity()
        self.confidence = nn.Linear(d, 1, bias=False)  # a shared bias would cancel in the softmax
        self.head = nn.Linear(d, num_classes)

    code_readers = Propagator.code_readers  # receivers: the read-out's codes; senders: the processors'

    def forward(self, readout_states, processor_states, readout_codes, processor_codes, K=None) -> torch.Tensor:
        B = processor_states.shape[0]
        y = readout_states.expand(B, *readout_states.shape[-2:])
        a = self.scale_attn(
            self.attn(
                self.norm_recv(y),
                self.norm_send(processor_states),
                readout_codes,
                processor_codes,
                K,
            )
        )
        y = y + a if self.residual else a
        y = y + self.scale_ffn(self.ffn(self.norm_ffn(y), readout_codes))
        h = self.norm_out(y)
        weight = self.confidence(h).softmax(dim=1)  # [B, U_o, 1]
        return (weight * self.head(h)).sum(dim=1)
