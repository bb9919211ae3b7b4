"""Circuit generators (paper section 2.2): they produce the circuit design, a signature, a code
and an initial state per module, for ``U_p`` processor and ``U_o`` read-out modules."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CircuitDesign:
    """Signatures ``[(B,) U, d_sig]``, codes ``[(B,) U, d_code]``, initial states ``[(B,) U, d]``
    for processor modules and (``readout_*``) read-out modules. Signatures are ``None`` when the
    graph is dense; codes are ``None`` when modules are unmodulated (Perceiver IO)."""

    signatures: torch.Tensor | None
    codes: torch.Tensor | None
    states: torch.Tensor
    readout_signatures: torch.Tensor | None
    readout_codes: torch.Tensor | None
    readout_states: torch.Tensor

    @property
    def per_sample(self) -> bool:
        return self.states.dim() == 3


def _mlp(d_in: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_out), nn.GELU(), nn.Linear(d_out, d_out))


@torch.no_grad()
def _unit_scale_(mlp: nn.Sequential, probe: torch.Tensor) -> None:
    """Rescale the MLP's output layer so that ``mlp(probe)`` has unit standard deviation.

    Initial states enter the pre-LayerNorm residual stream directly; with PyTorch's default
    init they come out at ~0.2 scale, the read-in's (nearly module-independent) update then
    dominates and the modules start as near-copies of one another, which slows training
    markedly at small budgets (measured on the embedded shapes task). Unit scale matches the
    Perceiver IO latents."""
    scale = mlp(probe).std().clamp_min(1e-6)
    mlp[-1].weight.div_(scale)
    mlp[-1].bias.div_(scale)


class UnconditionalCircuitGenerator(nn.Module):
    """Learnable signatures and codes (free parameters); initial states = a 2-layer MLP of the
    code (paper section 2.2; ``initial_state="mlp"``) or the code itself (the authors'
    ``use_code_as_mean_state``; ``"code"``, needs ``d_code == d``). In training, ``code_noise``
    and ``state_noise`` add Gaussian noise of that standard deviation to the codes and to the
    initial states (the authors' noisy initial states; code noise 0.05 in m2mKD), one draw per
    forward pass shared by the batch. ``learn_signatures=False`` keeps processor signatures fixed
    (a buffer): the frozen-graph rung of Table 1. ``use_signatures=False`` drops signatures (dense
    graph: the ``modfc`` rung)."""

    def __init__(
        self,
        *,
        n_processor: int,
        n_readout: int,
        d: int,
        d_code: int,
        d_sig: int,
        use_signatures: bool = True,
        learn_signatures: bool = True,
        initial_state: str = "mlp",
        code_noise: float = 0.0,
        state_noise: float = 0.0,
    ):
        super().__init__()
        if initial_state not in ("mlp", "code"):
            raise ValueError(f"unknown initial_state {initial_state!r}; valid choices: mlp, code")
        if initial_state == "code" and d_code != d:
            raise ValueError(f"initial_state='code' needs d_code == d, got {d_code} and {d}")
        self.initial_state, self.code_noise, self.state_noise = initial_state, float(code_noise), float(state_noise)
        self.codes = nn.Parameter(torch.randn(n_processor, d_code))
        self.readout_codes = nn.Parameter(torch.randn(n_readout, d_code))
        if initial_state == "mlp":
            self.state_mlp, self.readout_state_mlp = _mlp(d_code, d), _mlp(d_code, d)
            _unit_scale_(self.state_mlp, self.codes)
            _unit_scale_(self.readout_state_mlp, self.readout_codes)
        self.use_signatures, self.learn_signatures = use_signatures, learn_signatures
        if use_signatures:
            # Unit norm (the authors' randn has norm ~sqrt(d_sig)): Adam's absolute steps then turn
            # every signature at the same angular rate, whatever its initialisation (see
            # nac.signatures.fit_signatures_to_graph); NAC and the frozen graph overwrite these with
            # a preset fit unless signature_init is random.
            sig = F.normalize(torch.randn(n_processor, d_sig), dim=-1)
            if learn_signatures:
                self.signatures = nn.Parameter(sig)
            else:
                self.register_buffer("signatures", sig)
            self.readout_signatures = nn.Parameter(F.normalize(torch.randn(n_readout, d_sig), dim=-1))

    def _noisy(self, x: torch.Tensor, std: float) -> torch.Tensor:
        return x + std * torch.randn_like(x) if self.training and std > 0 else x

    def _states(self, codes: torch.Tensor, mlp: str) -> torch.Tensor:
        states = getattr(self, mlp)(codes) if self.initial_state == "mlp" else codes
        return self._noisy(states, self.state_noise)

    def forward(self, cond=None, cond_mask=None) -> CircuitDesign:
        codes, readout_codes = (
            self._noisy(self.codes, self.code_noise),
            self._noisy(self.readout_codes, self.code_noise),
        )
        return CircuitDesign(
            signatures=self.signatures if self.use_signatures else None,
            codes=codes,
            states=self._states(codes, "state_mlp"),
            readout_signatures=self.readout_signatures if self.use_signatures else None,
            readout_codes=readout_codes,
            readout_states=self._states(readout_codes, "readout_state_mlp"),
        )

    @torch.no_grad()
    def keep_processors(self, keep: torch.Tensor) -> None:
        """Keep only processor modules ``keep`` (indices): parameters are sliced, not masked."""
        self.codes = nn.Parameter(self.codes[keep].clone())
        if self.use_signatures:
            if self.learn_signatures:
                self.signatures = nn.Parameter(self.signatures[keep].clone())
            else:
                self.signatures = self.signatures[keep].clone()


class InputLatents(nn.Module):
    """The authors' separate input latents (``TINY-INET-NC-X``, m2mKD; ``ModelConfig.input_latents
    = N > 0``): ``N`` modules that read the input in place of the processors. Each has its own
    learnable code ``[N, d_code]`` and an initial state ``[N, d]`` made like the processors'
    (``initial_state``: an MLP of the code, or the code itself; ``code_noise`` / ``state_noise``
    in training, one draw per forward pass). Unmodulated (Perceiver IO): a learned latent array
    ``[N, d]`` and no codes.

    ``d_sig`` (a model with a kernel): a signature per input latent, ``signatures [N, d_sig]``,
    with which the propagators' and the read-out's kernels gate the links from the input latents
    as the authors' ``LatentGraph`` does (the senders' signatures are ``[input latents;
    processors]``, ``model/nc/block.py``). Initialised as the authors' ``graph_preset: null``
    (``input_latent_kwargs: null`` in ``TINY-INET-NC-X``): ``torch.randn`` directions, not fitted to
    any graph, stored at unit norm like the processors' and the read-out's random signatures here
    (the kernel reads only directions; see ``UnconditionalCircuitGenerator``). Learnable (a
    ``Parameter``) unless ``learn_signatures=False`` (the frozen-graph rung: a buffer, the whole
    graph fixed). Drawn after every other parameter of this module, so its other parameters are
    what they were before input latents had signatures.

    ``forward() -> (codes [N, d_code] or None, states [N, d])``."""

    def __init__(
        self,
        *,
        n: int,
        d: int,
        d_code: int,
        modulated: bool = True,
        initial_state: str = "mlp",
        code_noise: float = 0.0,
        state_noise: float = 0.0,
        d_sig: int | None = None,
        learn_signatures: bool = True,
    ):
        super().__init__()
        if initial_state not in ("mlp", "code"):
            raise ValueError(f"unknown initial_state {initial_state!r}; valid choices: mlp, code")
        if modulated and initial_state == "code" and d_code != d:
            raise ValueError(f"initial_state='code' needs d_code == d, got {d_code} and {d}")
        self.modulated, self.initial_state = modulated, initial_state
        self.code_noise, self.state_noise = float(code_noise), float(state_noise)
        if modulated:
            self.codes = nn.Parameter(torch.randn(n, d_code))
            if initial_state == "mlp":
                self.state_mlp = _mlp(d_code, d)
                _unit_scale_(self.state_mlp, self.codes)
        else:  # unit scale, like PerceiverLatents
            self.latents = nn.Parameter(torch.randn(n, d))
        if d_sig is None:  # no kernel (modfc, Perceiver IO): dense links
            self.signatures = None
        elif learn_signatures:
            self.signatures = nn.Parameter(F.normalize(torch.randn(n, d_sig), dim=-1))
        else:
            self.register_buffer("signatures", F.normalize(torch.randn(n, d_sig), dim=-1))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.signatures is not None and prefix + "signatures" not in state_dict:
            raise ValueError(
                "this checkpoint's input latents have no signatures: it was saved when their links were "
                "dense (before issue 31); the authors gate them with the kernel, as nac does now, so retrain "
                "the model (e.g. dvc repro the train stage) instead of loading it"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _noisy(self, x: torch.Tensor, std: float) -> torch.Tensor:
        return x + std * torch.randn_like(x) if self.training and std > 0 else x

    def forward(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        if not self.modulated:
            return None, self.latents
        codes = self._noisy(self.codes, self.code_noise)
        states = self.state_mlp(codes) if self.initial_state == "mlp" else codes
        return codes, self._noisy(states, self.state_noise)


class PerceiverLatents(nn.Module):
    """Perceiver IO's learned latent array and output queries, as a degenerate circuit design:
    no signatures (dense attention) and no codes (plain linear layers)."""

    def __init__(self, *, n_processor: int, n_readout: int, d: int):
        super().__init__()
        # Unit scale like the NAC's code-derived states: with pre-LayerNorm residuals, near-zero
        # latents start as near-copies of one another and train markedly slower at small budgets.
        self.latents = nn.Parameter(torch.randn(n_processor, d))
        self.readout_latents = nn.Parameter(torch.randn(n_readout, d))

    def forward(self, cond=None, cond_mask=None) -> CircuitDesign:
        return CircuitDesign(None, None, self.latents, None, None, self.readout_latents)

    @torch.no_grad()
    def keep_processors(self, keep: torch.Tensor) -> None:
        self.latents = nn.Parameter(self.latents[keep].clone())


class ConditionalCircuitGenerator(nn.Module):
    """A circuit design per sample from a conditioning set ``cond`` ``[B, N, d_cond]``
    (section 2.2 and 4.4): learned per-module queries cross-attend to ``cond``, then an FFN,
    then a self-attention layer among modules and two parallel FFNs that emit signatures and
    codes; initial states = a 2-layer MLP of the code. Designs cover processor and read-out
    modules (one query each). ``cond_mask`` ``[B, N]`` bool, True = real element.

    ``query_init`` is the standard deviation of the learned queries' entries. The paper does not
    give it; the authors initialise their other per-module vectors (signatures, codes) with
    ``torch.randn``, i.e. 1.0, the default. At 0.02 (a ViT-style token init, this class's first
    choice) every query attends alike, the cross-attention's module-independent output dominates
    ``h``, and all generated signatures point the same way: on mini's NLVR model, untrained,
    ``1 - cos`` between modules averaged 0.036 (truncation 0.9), so every graph was complete
    before training and stayed so after (docs/reference.md, "Conditional circuits")."""

    def __init__(
        self,
        *,
        n_processor: int,
        n_readout: int,
        d: int,
        d_code: int,
        d_sig: int,
        d_cond: int,
        heads: int = 4,
        ffn_mult: float = 2.0,
        query_init: float = 1.0,
    ):
        super().__init__()
        if not query_init > 0:
            raise ValueError(f"generator_query_init (std of the generator's queries) must be > 0, got {query_init}")
        self.n_processor = n_processor
        hidden = max(1, round(ffn_mult * d))
        self.queries = nn.Parameter(torch.randn(n_processor + n_readout, d) * query_init)
        self.norm_cond, self.norm_q = nn.LayerNorm(d_cond), nn.LayerNorm(d)
        self.cross = nn.MultiheadAttention(d, heads, kdim=d_cond, vdim=d_cond, batch_first=True)
        self.norm_ffn = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.self_attn = nn.TransformerEncoderLayer(
            d, heads, hidden, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.norm_heads = nn.LayerNorm(d)
        self.signature_ffn = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d_sig))
        self.code_ffn = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d_code))
        self.state_mlp, self.readout_state_mlp = _mlp(d_code, d), _mlp(d_code, d)
        probe = torch.randn(256, d_code)  # generated codes are not known yet; probe with unit-normal codes
        _unit_scale_(self.state_mlp, probe)
        _unit_scale_(self.readout_state_mlp, probe)

    def forward(self, cond: torch.Tensor, cond_mask: torch.Tensor | None = None) -> CircuitDesign:
        if cond is None:
            raise ValueError("the conditional circuit generator needs a conditioning input (cond); got None")
        B = cond.shape[0]
        q = self.queries.expand(B, *self.queries.shape)
        c = self.norm_cond(cond)
        pad = None if cond_mask is None else ~cond_mask
        h = q + self.cross(self.norm_q(q), c, c, key_padding_mask=pad, need_weights=False)[0]
        h = h + self.ffn(self.norm_ffn(h))
        h = self.norm_heads(self.self_attn(h))
        sig, code = self.signature_ffn(h), self.code_ffn(h)
        P = self.n_processor
        return CircuitDesign(
            sig[:, :P],
            code[:, :P],
            self.state_mlp(code[:, :P]),
            sig[:, P:],
            code[:, P:],
            self.readout_state_mlp(code[:, P:]),
        )

    def keep_processors(self, keep: torch.Tensor) -> None:
        raise NotImplementedError(
            "module dropping ranks modules by a fixed learned graph; a conditional NAC generates a new graph per "
            "sample, so drop modules from an unconditional NAC instead"
        )


__all__ = [
    "CircuitDesign",
    "UnconditionalCircuitGenerator",
    "InputLatents",
    "PerceiverLatents",
    "ConditionalCircuitGenerator",
]
