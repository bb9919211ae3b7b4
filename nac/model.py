"""Neural Attentive Circuits assembled: tokenizer -> circuit generator -> circuit executor
(read-in, L propagators, read-out). Every rung of the Table 1 ladder is a ``ModelConfig`` of
this one class (see ``nac.config.VARIANTS``)."""
from __future__ import annotations

import torch
import torch.nn as nn

from nac.baselines import ModularNetwork, ModularNetworkConfig, NeuralInterpreter, NeuralInterpreterConfig
from nac.circuits.generators import (CircuitDesign, ConditionalCircuitGenerator, PerceiverLatents,
                                     UnconditionalCircuitGenerator)
from nac.circuits.kernel import KernelSampler, link_probabilities, sample_kernel
from nac.graphs import prior_target
from nac.signatures import prior_signatures
from nac.circuits.layers import Propagator, ReadOut
from nac.circuits.readin import ReadIn
from nac.circuits.tokenizers import build_tokenizer
from nac.config import ModelConfig
from nac.regularizer import graph_structure_loss


class NAC(nn.Module):
    """``forward(inputs, mask=None, cond=None, cond_mask=None) -> logits [B, num_classes]``.

    inputs: whatever the tokenizer reads (images ``[B, 3, H, W]``, points ``[B, N, 3]``, token
    ids ``[B, T]``, ...); mask ``[B, T]`` bool marks real tokens; cond / cond_mask: what the
    conditional circuit generator reads.
    """

    sampler_impl = "sparse"  # nac.circuits.kernel.SAMPLER_IMPLS; "plain" is the reference form

    def __init__(self, config: ModelConfig, fit_signatures: bool = True):
        super().__init__()
        self.config = c = config
        self.tokenizer = build_tokenizer(c.tokenizer)
        if c.variant == "perceiver_io":
            self.generator = PerceiverLatents(c.n_processor, c.n_readout, c.d_model)
        elif c.generator == "conditional":
            self.cond_tokenizer = build_tokenizer(c.cond_tokenizer)
            self.generator = ConditionalCircuitGenerator(c.n_processor, c.n_readout, c.d_model, c.d_code, c.d_sig,
                                                         self.cond_tokenizer.d_out, c.generator_heads, c.ffn_mult,
                                                         query_init=c.generator_query_init)
        else:
            self.generator = UnconditionalCircuitGenerator(c.n_processor, c.n_readout, c.d_model, c.d_code, c.d_sig,
                                                           use_signatures=c.uses_kernel,
                                                           learn_signatures=c.variant == "nac")
        common = dict(modulated=c.modulated, gated=c.gated_ffn, alpha_init=c.alpha_init)
        self.read_in = ReadIn(self.tokenizer.d_out, c.d_model, c.d_code, c.readin_heads, ffn_mult=c.ffn_mult,
                              impl=c.readin_impl, **common)
        self.propagators = nn.ModuleList(
            Propagator(c.d_model, c.d_code, c.heads, c.ffn_mult, drop_path=c.drop_path * (i + 1) / c.depth,
                       layer_scale=c.layer_scale, delta=c.delta, **common)
            for i in range(c.depth))
        self.read_out = ReadOut(c.d_model, c.d_code, c.readout_heads, c.num_classes, c.ffn_mult, delta=c.delta, **common)
        if c.uses_kernel or c.generator == "conditional":
            bw = torch.tensor(float(c.bandwidth))
            # A scalar: the loop's 1-d rule keeps it out of weight decay, as the authors do.
            if c.learn_bandwidth:
                self.bandwidth = nn.Parameter(bw)
            else:
                self.register_buffer("bandwidth", bw)
        G = None
        if c.variant == "nac" and c.regularizer != "none" and (c.generator == "unconditional" or c.generator_regularizer):
            G = torch.as_tensor(prior_target(c.prior, c.n_processor, **c.prior_params), dtype=torch.float32)
        self.register_buffer("prior_target", G, persistent=False)  # rebuilt from the config, not stored
        if fit_signatures:
            self._preset_signatures()

    def _preset_signatures(self) -> None:
        """Processor signatures fitted to a sampled graph (the authors' preset initialisation,
        ``nac.signatures.prior_signatures``): a Barabasi-Albert graph for the frozen-graph rung, a
        graph from the NAC's own prior when ``signature_init == "prior"``. A checkpoint load
        skips this (the signatures come from the state dict)."""
        c = self.config
        if c.variant == "frozen_graph":
            if c.frozen_graph_m >= c.n_processor:
                raise ValueError(f"frozen_graph_m={c.frozen_graph_m} must be below n_processor={c.n_processor} "
                                 "(a Barabasi-Albert graph attaches m links per new node)")
            prior, params = "scale_free", {"m": c.frozen_graph_m}
        elif c.variant == "nac" and c.generator == "unconditional" and c.signature_init == "prior":
            prior, params = c.prior, c.prior_params
        else:
            return
        sig, _ = prior_signatures(prior, c.n_processor, c.d_sig, seed=c.graph_seed, prior_params=params,
                                  truncation=c.truncation, bandwidth=c.bandwidth, steps=c.signature_fit_steps)
        with torch.no_grad():
            self.generator.signatures.copy_(sig)

    # -- the circuit design and its graph -------------------------------------------------
    def design(self, cond=None, cond_mask=None) -> CircuitDesign:
        if self.config.generator == "conditional":
            if cond is None:
                raise ValueError("this NAC has a conditional circuit generator: pass cond= (e.g. the sentence tokens)")
            cond = self.cond_tokenizer(cond)
        return self.generator(cond, cond_mask)

    def link_probabilities(self, design: CircuitDesign | None = None) -> torch.Tensor:
        """Processor-to-processor link probabilities ``P`` (eq. 2): ``[U_p, U_p]`` for an
        unconditional design, ``[B, U_p, U_p]`` for a conditional one."""
        design = design or self.design()
        if design.signatures is None:
            raise ValueError(f"variant {self.config.variant!r} has no signatures, so no link probabilities")
        return self._P(design.signatures)

    def _P(self, s_recv: torch.Tensor, s_send: torch.Tensor | None = None) -> torch.Tensor:
        """Eq. 2 with this model's (learnable) bandwidth and the config's truncation. The
        bandwidth is floored at 1e-3: a step that drove it through 0 would flip the kernel."""
        c = self.config
        return link_probabilities(s_recv, s_send, bandwidth=self.bandwidth.clamp_min(1e-3), truncation=c.truncation,
                                  straight_through=c.straight_through)

    def graph_regularizer(self, design: CircuitDesign | None = None) -> torch.Tensor:
        """Graph-structure regularizer between ``P`` and the prior's target (0 for other rungs)."""
        if self.prior_target is None:
            return torch.zeros(())
        if self.config.generator == "conditional":
            return self.conditional_graph_regularizer(design)
        return graph_structure_loss(self.link_probabilities(design), self.prior_target, kind=self.config.regularizer)

    def conditional_graph_regularizer(self, design: CircuitDesign) -> torch.Tensor:
        """The regularizer on a conditional design (``generator_regularizer``; not in the paper,
        whose section 4.4 trains without one): the mean over samples of each sample's ``P``
        ``[U_p, U_p]`` against the prior's target, one matching per sample."""
        P = self.link_probabilities(design)
        return torch.stack([graph_structure_loss(Pb, self.prior_target, kind=self.config.regularizer) for Pb in P]).mean()

    def _kernel(self, P: torch.Tensor, batch_size: int) -> torch.Tensor | None:
        mode = "sample" if self.training else self.config.eval_kernel
        return sample_kernel(P, self.config.tau, batch_size=batch_size, mode=mode)

    def _sampler(self, P: torch.Tensor | None) -> KernelSampler | None:
        """``_kernel(P, B)`` as ``sampler(B)``, ``P``'s logits computed once for all layers
        (``KernelSampler``; ``sampler_impl = "plain"`` draws with ``sample_kernel`` itself;
        ``"sparse"``, the default, applies on CPU, elsewhere ``"prepared"``)."""
        if P is None:
            return None
        mode = "sample" if self.training else self.config.eval_kernel
        impl = self.sampler_impl
        if impl == "sparse" and P.device.type != "cpu":  # a CPU optimisation; no host syncs on CUDA
            impl = "prepared"
        return KernelSampler(P, self.config.tau, mode=mode, impl=impl)

    # -- the executor -------------------------------------------------------------------------
    def forward(self, inputs, mask=None, cond=None, cond_mask=None, design: CircuitDesign | None = None) -> torch.Tensor:
        return self.execute(self.tokenizer(inputs), mask, cond, cond_mask, design)

    def execute(self, tokens: torch.Tensor, mask=None, cond=None, cond_mask=None,
                design: CircuitDesign | None = None) -> torch.Tensor:
        """Everything after the tokenizer: ``forward(x) == execute(tokenizer(x))``. Dropping
        modules leaves the tokenizer unchanged, so the prune sweep tokenizes once and executes
        each smaller model on the same tokens (``nac.evaluation.predict_tokens``)."""
        B = tokens.shape[0]
        design = design or self.design(cond, cond_mask)
        states = self.read_in(tokens, design.states, design.codes, mask)
        P_pp = P_op = None
        if design.signatures is not None:
            P_pp = self._P(design.signatures)
            P_op = self._P(design.readout_signatures, design.signatures)
        sample_pp, sample_op = self._sampler(P_pp), self._sampler(P_op)
        for layer in self.propagators:
            K = None if sample_pp is None else sample_pp(B)    # a fresh sample per layer
            states = layer(states, design.codes, K)
        K_out = None if sample_op is None else sample_op(B)
        return self.read_out(design.readout_states, states, design.readout_codes, design.codes, K_out)


BASELINES = {"neural_interpreter": (NeuralInterpreterConfig, NeuralInterpreter),
             "modular_network": (ModularNetworkConfig, ModularNetwork)}


def build_model(config: ModelConfig | NeuralInterpreterConfig | ModularNetworkConfig | dict,
                fit_signatures: bool = True) -> nn.Module:
    """Build a NAC (any rung of the ladder) or a baseline (``BASELINES``, by ``variant``) from its
    config or the config's dict form (what a checkpoint stores); ``fit_signatures=False`` skips
    the NAC's preset fit (the weights are loaded next)."""
    if isinstance(config, dict):
        cls = BASELINES[config["variant"]][0] if config.get("variant") in BASELINES else ModelConfig
        config = cls.from_dict(config)
    if isinstance(config, ModelConfig):
        return NAC(config, fit_signatures=fit_signatures)
    return BASELINES[config.variant][1](config)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
