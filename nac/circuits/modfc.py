"""ModFC and ModFFN (paper eq. 1): fully-connected layers modulated by a module's code.

``ModFC(x; c) = W (x * (1 + alpha * LayerNorm(W_c c))) + b``

The LayerNorm has no learnable scale or shift (the authors' ``F.layer_norm`` without weight and
bias; ``norm_affine=True`` adds them, as ``nac`` v1 did). ``gain="ln_only"`` is the class default
of the authors' ModFC that ``TINY-INET-NC-X`` uses: ``W (x * LayerNorm(W_c c)) + b``, no ``1 +``
and no ``alpha`` (gain fixed at 1); the paper's eq. 1 is ``one_plus_alpha``, the default here.

All U modules run at once and share ``W``, ``b``, ``W_c`` and ``alpha``; only the code differs,
so the parameter count does not grow with the number of modules. Codes are ``[U, d_code]``
(one circuit design for the whole batch) or ``[B, U, d_code]`` (a design per sample, from the
conditional circuit generator). With ``modulated=False`` a ModFC is a plain ``nn.Linear`` (the
Perceiver IO rung of the Table 1 ladder) and ignores the code.

Batched modulation: the modulation is row-wise in the code (module u's row depends only on code
row u), so one forward's modulations of every ModFC that reads the same code tensor can be
computed together (``batched_modulations``: one product with every ``W_c`` stacked, one
LayerNorm per width, one ``alpha`` product) and handed to each ModFC as a ``Modulations`` in
place of the code tensor. ``NAC.execute`` does this (``NAC.code_modulations``); a code tensor
passed directly keeps the per-layer form, the reference (``nac/testing/reference_forms.py``,
``tests/test_modfc_batched.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

MODFC_GAINS = ("one_plus_alpha", "ln_only")


@dataclass(frozen=True)
class ModFCForm:
    """How every ModFC of a model modulates (module doc): ``modulated=False`` is a plain
    ``nn.Linear``; ``alpha_init`` the initial ``alpha``; ``norm_affine`` gives the LayerNorm a scale
    and shift; ``gain`` one of ``MODFC_GAINS``. One per model (``NAC`` builds it from its config),
    handed to each layer at construction."""

    modulated: bool = True
    alpha_init: float = 0.1
    norm_affine: bool = False
    gain: str = "one_plus_alpha"


class ModFC(nn.Module):
    """Eq. 1. ``x``: ``[B, U, ..., d_in]`` (module axis second); ``code``: ``[U, d_code]`` or
    ``[B, U, d_code]``. Returns ``[B, U, ..., d_out]``."""

    def __init__(self, d_in: int, d_out: int, d_code: int, *, form: ModFCForm = ModFCForm(), bias: bool = True):
        super().__init__()
        if form.gain not in MODFC_GAINS:
            raise ValueError(f"unknown ModFC gain {form.gain!r}; valid choices: {', '.join(MODFC_GAINS)}")
        self.d_in, self.d_out, self.modulated = d_in, d_out, form.modulated
        self.modulation_key: str | None = None  # its name in the model (``name_modfcs``): its entry in a Modulations
        self.modulation_slot: str | None = None  # its name inside its layer (``name_modfcs``): in a layer's scope
        self.linear = nn.Linear(d_in, d_out, bias=bias)
        if form.modulated:
            self.code_proj = nn.Linear(d_code, d_in, bias=False)  # W_c, no bias (authors' code)
            self.gain, self.alpha_init = form.gain, float(form.alpha_init)
            self.code_norm = nn.LayerNorm(d_in, elementwise_affine=form.norm_affine)
            self.alpha = nn.Parameter(torch.tensor(self.alpha_init)) if form.gain == "one_plus_alpha" else None

    def modulation(self, code: torch.Tensor) -> torch.Tensor:
        """``1 + alpha * LayerNorm(W_c c)`` (``ln_only``: ``LayerNorm(W_c c)``): ``[(B,) U, d_in]``."""
        h = self.code_norm(self.code_proj(code))
        return h if self.alpha is None else 1.0 + self.alpha * h

    def modulation_of(self, code: torch.Tensor | Modulations) -> torch.Tensor:
        """``modulation(code)``, or this ModFC's precomputed entry when ``code`` is a ``Modulations``."""
        return code.of(self) if isinstance(code, Modulations) else self.modulation(code)

    def forward(self, x: torch.Tensor, code: torch.Tensor | Modulations | None) -> torch.Tensor:
        if not self.modulated:
            return self.linear(x)
        return self.linear(x * broadcast_to_modules(self.modulation_of(code), x))


class Modulations:
    """A code tensor ``code`` ``[(B,) U, d_code]`` with the modulations ``[(B,) U, d_in]`` of the
    ModFCs that read it, computed together (``batched_modulations``), keyed by the ModFCs'
    ``modulation_key``. It goes wherever the code tensor would; each ModFC takes its own entry."""

    def __init__(self, code: torch.Tensor, table: dict[str, torch.Tensor], scoped: bool = False):
        self.code, self.table, self.scoped = code, table, scoped

    def scope(self, prefix: str) -> Modulations:
        """The entries of the layer named ``prefix`` (``"propagators.3."``), keyed by the ModFCs'
        ``modulation_slot`` (their names inside the layer): what each propagator is handed, so that
        every propagator reads its own entries by the same keys (one compiled graph serves them all,
        ``train.compile_scope: regional``; the same tensors either way)."""
        n = len(prefix)
        return Modulations(self.code, {k[n:]: v for k, v in self.table.items() if k.startswith(prefix)}, scoped=True)

    def of(self, fc: ModFC) -> torch.Tensor:
        m = self.table.get(fc.modulation_slot if self.scoped else fc.modulation_key)
        if m is None:
            raise KeyError(
                f"ModFC {fc.modulation_key!r} was handed precomputed modulations that do not include it: "
                "list it among the readers of that code (NAC.code_modulations), or pass it the code tensor "
                "itself (it then computes its own modulation)"
            )
        return m


def name_modfcs(module: nn.Module) -> None:
    """Give every modulated ModFC inside ``module`` its qualified name as ``modulation_key``, and its
    name inside the outermost numbered layer that holds it (``propagators.3.ffn.fc1`` -> ``ffn.fc1``;
    the whole name where none does) as ``modulation_slot`` (``Modulations.scope``)."""
    for name, m in module.named_modules():
        if isinstance(m, ModFC) and m.modulated:
            parts = name.split(".")
            first = next((i for i, part in enumerate(parts) if part.isdigit()), -1)
            m.modulation_key, m.modulation_slot = name, ".".join(parts[first + 1 :])


def modfcs(module: nn.Module) -> list[ModFC]:
    """The modulated ModFCs inside ``module``, in module order."""
    return [m for m in module.modules() if isinstance(m, ModFC) and m.modulated]


def batched_modulations(code: torch.Tensor, fcs: list[ModFC]) -> Modulations:
    """Every ``fc.modulation(code)`` of ``fcs`` at once: ``code`` ``[(B,) U, d_code]`` times all
    their ``W_c`` stacked (one product), split by width (one LayerNorm per width over
    ``[(B,) U, n, d_in]``, with the stacked affine parameters where they have them), then one
    ``1 + alpha * h`` with the stacked ``alpha`` (``one_plus_alpha``). Each ModFC's entry is a
    view ``[(B,) U, d_in]`` (``unbind``, whose backward is one ``stack``).

    Equal to the per-layer form up to float rounding: the elementwise steps are the same
    operations, but the product (and its backward) runs as one larger matrix product, whose
    blocking and summation order may differ in the last bits."""
    groups: dict[tuple, list[ModFC]] = {}
    for fc in fcs:
        if fc.modulation_key is None:
            raise ValueError("batched_modulations needs named ModFCs: call nac.circuits.modfc.name_modfcs(model)")
        norm = fc.code_norm
        groups.setdefault((fc.d_in, fc.gain, norm.elementwise_affine, norm.bias is not None, norm.eps), []).append(fc)
    order = [fc for g in groups.values() for fc in g]
    W = torch.cat([fc.code_proj.weight for fc in order]) if len(order) > 1 else order[0].code_proj.weight
    h_all = F.linear(code, W)  # [(B,) U, sum d_in]
    parts = h_all.split([len(g) * g[0].d_in for g in groups.values()], dim=-1) if len(groups) > 1 else (h_all,)
    table = {}
    for (d, gain, affine, has_bias, eps), g, part in zip(groups, groups.values(), parts):
        n = len(g)
        h = F.layer_norm(part.unflatten(-1, (n, d)), (d,), eps=eps)  # [(B,) U, n, d]
        if affine:
            h = h * torch.stack([fc.code_norm.weight for fc in g])
            if has_bias:
                h = h + torch.stack([fc.code_norm.bias for fc in g])
        if gain == "one_plus_alpha":
            h = 1.0 + torch.stack([fc.alpha for fc in g]).unsqueeze(-1) * h
        table.update(zip((fc.modulation_key for fc in g), h.unbind(-2)))
    return Modulations(code, table)


def broadcast_to_modules(m: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """View a per-module tensor ``[(B,) U, d]`` so it broadcasts against ``x = [B, U, ..., d]``
    (against ``[B, U, d]`` it does as it is: no view ops, in the forward or the backward)."""
    if x.dim() == 3:
        return m
    if m.dim() == 2:
        m = m.unsqueeze(0)
    return m.view(m.shape[0], m.shape[1], *([1] * (x.dim() - 3)), m.shape[-1])


class ModFFN(nn.Module):
    """A two-layer ModFFN: ``ModFC -> GELU -> ModFC`` sharing one code (paper section 2).

    ``gated=True`` gives the GEGLU form used in the authors' ImageNet config (the first ModFC
    emits value and gate). Shapes as ``ModFC``; hidden width ``round(ffn_mult * d)``.
    """

    def __init__(
        self,
        *,
        d: int,
        d_code: int,
        ffn_mult: float = 4.0,
        gated: bool = False,
        dropout: float = 0.0,
        form: ModFCForm = ModFCForm(),
    ):
        super().__init__()
        hidden = max(1, round(ffn_mult * d))
        self.gated = gated
        self.fc1 = ModFC(d, hidden * (2 if gated else 1), d_code, form=form)
        self.fc2 = ModFC(hidden, d, d_code, form=form)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, code: torch.Tensor | None) -> torch.Tensor:
        h = self.fc1(x, code)
        if self.gated:
            value, gate = h.chunk(2, dim=-1)
            h = value * F.gelu(gate)
        else:
            h = F.gelu(h)
        return self.fc2(self.drop(h), code)
