"""The plain forms the package's fast paths are proven equal to (issue 24, item 4). The package
keeps only the fast path; each plain form lives here (``nac.testing``), where the equality tests
import it to run it beside the fast one (and bench/ scripts import it to time it):

- ``per_layer_modulation``: every ModFC computes its own code modulation, instead of
  ``NAC.code_modulations`` computing them together (tests/test_modfc_batched.py);
- ``direct_readin``: the read-in's per-module keys and values, eq. 4 as printed, instead of
  ``ReadIn.attend``'s folded query (tests/test_circuits.py, tests/test_modfc_batched.py);
- ``plain_ni``: the Neural Interpreter's ModLin, ModAttn and LOC as printed (eqs. 4, 6-10)
  (tests/test_speed_equivalence.py);
- ``lr_at``: the LR schedule as a formula, which the training loop's ``torch.optim.lr_scheduler``
  must give at every step (tests/test_training.py).

``per_layer_modulation``, ``direct_readin`` and ``plain_ni`` put the plain method on the instances
given (an instance attribute hides the class's method; ``copy.deepcopy``, as the EMA and module
dropping use, binds it to the copy); used as ``with ...:`` they take it off again on exit.
"""

from __future__ import annotations

import math
from types import MethodType

import torch
import torch.nn as nn

from nac.baselines.ni_layers import EPS, LOC, ModAttn, ModLin
from nac.circuits.layers import cat_modules
from nac.circuits.readin import ReadIn


class _Patched:
    """Binds each ``fn`` to its module as the method ``name`` (an instance attribute) at once;
    as a context manager, removes them again on exit."""

    def __init__(self, pairs: list[tuple[nn.Module, str, object]]):
        self.pairs = pairs
        for module, name, fn in pairs:
            setattr(module, name, MethodType(fn, module))

    def __enter__(self) -> "_Patched":
        return self

    def __exit__(self, *exc) -> None:
        for module, name, _ in self.pairs:
            if name in vars(module):
                delattr(module, name)


# ------------------------------------------------------------------ NAC: per-layer code modulation
def per_layer_code_modulations(model, design, latent_codes: torch.Tensor | None = None) -> dict:
    """``NAC.code_modulations``' reference form: the code tensors themselves (``processors``
    ``[(B,) U, d_code]``, ``readout``, ``latents``, ``senders`` = ``[latents; processors]``), so
    that each ModFC computes its own modulation ``1 + alpha * LN(W_c c)`` when it runs."""
    send = cat_modules(latent_codes, design.codes) if latent_codes is not None else design.codes
    return {"processors": design.codes, "readout": design.readout_codes, "latents": latent_codes, "senders": send}


def per_layer_modulation(*models: nn.Module):
    """The NACs run the per-layer modulation (in the ``with`` block, used as one)."""
    return _Patched([(m, "code_modulations", per_layer_code_modulations) for m in models])


# ------------------------------------------------------------------ read-in: eq. 4 as printed
def direct_attend(readin: ReadIn, x: torch.Tensor, h: torch.Tensor, codes, mask=None) -> torch.Tensor:
    """``ReadIn.attend``'s reference form, eq. 4 literally: per-module keys and values
    ``[B, U, T, d]``. x ``[B, T, d_in]`` (normalised tokens), h ``[B, U, d]`` -> ``[B, U, d]``."""
    B, U, T, H, e = h.shape[0], h.shape[1], x.shape[1], readin.heads, readin.d_head
    q = readin.q(h, codes).unflatten(-1, (H, e))  # [B, U, H, e]
    xu = x.unsqueeze(1).expand(B, U, T, x.shape[-1])
    k = readin.k(xu, codes).unflatten(-1, (H, e))  # [B, U, T, H, e]
    v = readin.v(xu, codes).unflatten(-1, (H, e))
    scores = torch.einsum("buhe,buthe->bhut", q, k) / math.sqrt(e)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    a = scores.softmax(dim=-1)
    return torch.einsum("bhut,buthe->buhe", a, v).flatten(2)


def direct_readin(*modules: nn.Module):
    """Every ReadIn inside the modules attends the direct way (in the ``with`` block, used as one)."""
    return _Patched([(m, "attend", direct_attend) for mod in modules for m in mod.modules() if isinstance(m, ReadIn)])


# ------------------------------------------------------------------ Neural Interpreter: eqs. 4, 6-10 as printed
def plain_modlin_forward(self: ModLin, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Eq. 4 as printed, ``W (x * LayerNorm(W_c c)) + b``: x ``[..., U, V, d_in]``, c
    ``[..., U, d_cond]`` -> ``[..., U, V, d_out]``."""
    return self.linear(x * self.modulation(c).unsqueeze(-2))


def modulated_attention_weights(
    q: torch.Tensor, k: torch.Tensor, C: torch.Tensor, key_mask: torch.Tensor | None = None, eps: float = EPS
) -> torch.Tensor:
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


def plain_modattn_forward(self: ModAttn, x, c, C, key_mask=None) -> torch.Tensor:
    """Eqs. 6-8 as printed (the ``[B, U, H, V, V]`` weights formed): x ``[B, U, V, d]``, c
    ``[U, d_code]``, C ``[B, U, V]`` -> ``[B, U, V, d]``."""
    H = self.heads
    q = self.query(x, c).unflatten(-1, (H, -1))  # eq. 6: [B, U, V, H, d_key]
    k = self.key(x, c).unflatten(-1, (H, -1))
    v = self.value(x, c).unflatten(-1, (H, -1))  # [B, U, V, H, d / H]
    W = modulated_attention_weights(q, k, C, key_mask)  # eq. 7: [B, U, H, V, V]
    y = torch.einsum("buhij,bujhe->buihe", W, v).flatten(-2)  # eq. 8: heads folded
    return self.out(y, c)


def plain_loc_forward(self: LOC, x, c, C, key_mask=None) -> torch.Tensor:
    """Eqs. 9-10 as printed: every stream normalised by itself (no shared broadcast source)."""
    gate = C.unsqueeze(-1)
    a = x + gate * self.attn(self.attn_norm(x), c, C, key_mask)  # eq. 9
    return a + gate * self.mlp(self.mlp_norm(a), c)  # eq. 10


_PLAIN_NI = {ModLin: plain_modlin_forward, ModAttn: plain_modattn_forward, LOC: plain_loc_forward}


def plain_ni(module: nn.Module):
    """Every ModLin, ModAttn and LOC inside runs its printed form (in the ``with`` block, used as one)."""
    return _Patched([(m, "forward", _PLAIN_NI[type(m)]) for m in module.modules() if type(m) in _PLAIN_NI])


# ------------------------------------------------------------------ the LR schedule
def lr_at(step: int, total: int, warmup: int, peak: float, floor: float) -> float:
    """Linear warm-up from ``peak / warmup`` to ``peak`` over ``warmup`` steps, then cosine decay
    to ``floor`` at step ``total`` (the loop's hand-written schedule before issue 24)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * min(1.0, progress)))
