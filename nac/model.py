"""Neural Attentive Circuits assembled: tokenizer -> circuit generator -> circuit executor
(read-in, L propagators, read-out). Every rung of the Table 1 ladder is a ``ModelConfig`` of
this one class (see ``nac.config.VARIANTS``)."""

from __future__ import annotations

import torch
import torch.nn as nn

from nac.circuit_graph import CircuitGraph
from nac.circuits.attention import SKMDPA
from nac.circuits.generators import (
    CircuitDesign,
    ConditionalCircuitGenerator,
    InputLatents,
    PerceiverLatents,
    UnconditionalCircuitGenerator,
)
from nac.circuits.kernel import KERNEL_MODES
from nac.circuits.layers import Propagator, ReadOut, cat_modules
from nac.circuits.modfc import ModFCForm, Modulations, batched_modulations, modfcs, name_modfcs
from nac.circuits.readin import ReadIn
from nac.circuits.tokenizers import build_tokenizer
from nac.config import ModelConfig
from nac.graphs import prior_target
from nac.signatures import prior_signatures


class NAC(nn.Module):
    """``forward(inputs, mask=None, cond=None, cond_mask=None) -> logits [B, num_classes]``.

    inputs: whatever the tokenizer reads (images ``[B, 3, H, W]``, points ``[B, N, 3]``, token
    ids ``[B, T]``, ...); mask ``[B, T]`` bool marks real tokens; cond / cond_mask: what the
    conditional circuit generator reads.

    ``graph`` (``nac.circuit_graph.CircuitGraph``): the model's circuit graph, a part it owns and
    reads through it: the kernels' link probabilities ``P`` (eq. 2; ``graph.link_probabilities()``,
    ``graph.kernel_probabilities(design)``, ``graph.kernel_bandwidth(layer)``), the graph
    regularizer (``graph.regularizer()``) and the executor's kernel samplers. A plain object, not a
    module: it holds no parameters or buffers (the state dict is the model's children's and its own
    ``bandwidth``) and reads the model's current tensors at each call.

    ``input_latents = N > 0`` (the authors' ``TINY-INET-NC-X`` and m2mKD layout, their
    ``LatentGraph`` in ``model/nc/block.py`` with its defaults): the read-in reads the input into
    ``N`` separate input latents (``self.input_latents``, an ``InputLatents``: their own codes,
    initial states and signatures; no kernel in the read-in) instead of into the processors,
    whose states start as their initial states; every propagator's processors attend to
    ``[input latents; processors]`` and the read-out to the same set; the input latents' states
    are not updated after the read-in (they only send). As in the authors' code, each of these
    attentions has one kernel over the concatenated signatures: the links from the input latents
    are gated by ``P = exp(-d / eps)`` of their signatures with the same bandwidth, truncation
    (the read-out's only with ``truncate_readout``), Concrete sampling and eq. 3 normalisation
    (over the whole row) as the processors' links (``graph.executor_probabilities``). The input
    latents' signatures are random and learnable (the authors' ``input_latent_kwargs: null``;
    fixed for the frozen-graph rung), not fitted to a prior; the graph, the regularizer (the
    authors' ``regularize_input_latents: false``), the mechanism numbers and module dropping
    cover the processors only. Without a kernel (``modfc``, Perceiver IO) every link is dense.

    ``cpu_shortcuts`` (keyword; default True): on the CPU, take the CPU-only fast forms (the
    sparse kernel sample and its bias, explicit attention, each layer drawing its own kernel); False takes
    the forms CUDA takes on every device (fixed shapes, no host sync: what bench/bench_ops.py and
    the sync tests count on the CPU). The same draws and formulas either way (equal to float
    rounding; ``tests/test_speed_equivalence.py``); off the CPU, and while ``torch.compile``
    traces, CUDA's forms are taken regardless (``nac.circuits.kernel.cpu_shortcut``). Not part of
    the config (no effect on what is trained, stored or hashed); ``set_cpu_shortcuts`` changes it
    on a built model.
    """

    def __init__(self, config: ModelConfig, *, fit_signatures: bool = True, cpu_shortcuts: bool = True):
        super().__init__()
        self.config = c = config
        self.cpu_shortcuts = cpu_shortcuts
        # the circuit graph (kernels, their samplers, the regularizer): a plain object, no parameters
        self.graph = CircuitGraph(self)
        self.tokenizer = build_tokenizer(c.tokenizer)
        if c.variant == "perceiver_io":
            self.generator = PerceiverLatents(n_processor=c.n_processor, n_readout=c.n_readout, d=c.d_model)
        elif c.generator == "conditional":
            self.cond_tokenizer = build_tokenizer(c.cond_tokenizer)
            self.generator = ConditionalCircuitGenerator(
                n_processor=c.n_processor,
                n_readout=c.n_readout,
                d=c.d_model,
                d_code=c.d_code,
                d_sig=c.d_sig,
                d_cond=self.cond_tokenizer.d_out,
                heads=c.generator_heads,
                ffn_mult=c.ffn_mult,
                query_init=c.generator_query_init,
            )
        else:
            self.generator = UnconditionalCircuitGenerator(
                n_processor=c.n_processor,
                n_readout=c.n_readout,
                d=c.d_model,
                d_code=c.d_code,
                d_sig=c.d_sig,
                use_signatures=c.uses_kernel,
                learn_signatures=c.variant == "nac",
                initial_state=c.initial_state,
                code_noise=c.code_noise,
                state_noise=c.state_noise,
            )
        has_kernel = c.uses_kernel or c.generator == "conditional"
        if c.input_latents:  # created only then: the default model's parameters and RNG draws are unchanged
            self.input_latents = InputLatents(
                n=c.input_latents,
                d=c.d_model,
                d_code=c.d_code,
                modulated=c.modulated,
                initial_state=c.initial_state,
                code_noise=c.code_noise,
                state_noise=c.state_noise,
                d_sig=c.d_sig if has_kernel else None,
                learn_signatures=c.variant != "frozen_graph",
            )
        # One kernel bandwidth per attention module (authors), owned by the module; else one shared.
        own_bw = dict(
            bandwidth=c.bandwidth if has_kernel and c.kernel_per_module else None, learn_bandwidth=c.learn_bandwidth
        )
        # Every ModFC's form (eq. 1), one per model, given to each layer as it is built.
        form = ModFCForm(
            modulated=c.modulated, alpha_init=c.alpha_init, norm_affine=c.modfc_norm_affine, gain=c.modfc_gain
        )
        common = dict(
            d_code=c.d_code, head_dim=c.head_dim, qkv_bias=c.qkv_bias, ffn_mult=c.ffn_mult, gated=c.gated_ffn, form=form
        )
        self.read_in = ReadIn(d_in=self.tokenizer.d_out, d=c.d_model, heads=c.readin_heads, **common)
        self.propagators = nn.ModuleList(
            Propagator(
                d=c.d_model,
                heads=c.heads,
                drop_path=self.drop_path_rate(i),
                layer_scale=c.layer_scale,
                delta=c.delta,
                cpu_shortcuts=cpu_shortcuts,
                **own_bw,
                **common,
            )
            for i in range(c.depth)
        )
        self.read_out = ReadOut(
            d=c.d_model,
            heads=c.readout_heads,
            num_classes=c.num_classes,
            delta=c.delta,
            residual=c.readout_residual,
            norm=c.readout_norm,
            layer_scale=c.readout_layer_scale,
            cpu_shortcuts=cpu_shortcuts,
            **own_bw,
            **common,
        )
        if c.modulated:
            name_modfcs(self)
        if has_kernel and not c.kernel_per_module:
            bw = torch.tensor(float(c.bandwidth))
            if c.learn_bandwidth:
                self.bandwidth = nn.Parameter(bw)
            else:
                self.register_buffer("bandwidth", bw)
        G = None
        if (
            c.variant == "nac"
            and c.regularizer != "none"
            and (c.generator == "unconditional" or c.generator_regularizer)
        ):
            G = torch.as_tensor(
                prior_target(c.prior, c.n_processor, diagonal=c.target_diagonal, **c.prior_params), dtype=torch.float32
            )
        self.register_buffer("prior_target", G, persistent=False)  # rebuilt from the config, not stored
        if fit_signatures:
            self._preset_signatures()

    def set_cpu_shortcuts(self, enabled: bool) -> NAC:
        """Set ``cpu_shortcuts`` (the constructor's keyword) on this model and on every attention
        module in it, in place; returns the model. For a model built already (e.g. one handed to
        bench/bench_ops.py, which counts CUDA's paths on the CPU); prefer the constructor's
        keyword where the model is built."""
        self.cpu_shortcuts = enabled
        for m in self.modules():
            if isinstance(m, SKMDPA):
                m.cpu_shortcuts = enabled
        return self

    def drop_path_rate(self, layer: int) -> float:
        """Drop-path rate of propagator ``layer`` (0-based): ``drop_path`` in every layer
        (``uniform``, the authors') or growing linearly to it at the last layer (``linear``, nac v1)."""
        c = self.config
        return c.drop_path if c.drop_path_schedule == "uniform" else c.drop_path * (layer + 1) / c.depth

    def _preset_signatures(self) -> None:
        """Processor signatures fitted to a sampled graph (the authors' preset initialisation,
        ``nac.signatures.prior_signatures``): a Barabasi-Albert graph for the frozen-graph rung, a
        graph from the NAC's own prior when ``signature_init == "prior"``. A checkpoint load
        skips this (the signatures come from the state dict)."""
        c = self.config
        if c.variant == "frozen_graph":
            if c.frozen_graph_m >= c.n_processor:
                raise ValueError(
                    f"frozen_graph_m={c.frozen_graph_m} must be below n_processor={c.n_processor} "
                    "(a Barabasi-Albert graph attaches m links per new node)"
                )
            prior, params = "scale_free", {"m": c.frozen_graph_m}
        elif c.variant == "nac" and c.generator == "unconditional" and c.signature_init == "prior":
            prior, params = c.prior, c.prior_params
        else:
            return
        sig, _ = prior_signatures(
            prior,
            c.n_processor,
            c.d_sig,
            seed=c.graph_seed,
            prior_params=params,
            truncation=c.truncation if c.signature_fit_threshold is None else c.signature_fit_threshold,
            bandwidth=c.bandwidth,
            steps=c.signature_fit_steps,
            fit=c.signature_fit,
        )
        with torch.no_grad():
            self.generator.signatures.copy_(sig)

    # -- the circuit design and its graph -------------------------------------------------
    def design(self, cond=None, cond_mask=None) -> CircuitDesign:
        if self.config.generator == "conditional":
            if cond is None:
                raise ValueError("this NAC has a conditional circuit generator: pass cond= (e.g. the sentence tokens)")
            cond = self.cond_tokenizer(cond)
        return self.generator(cond, cond_mask)

    # -- the executor -------------------------------------------------------------------------
    def forward(
        self,
        inputs,
        mask=None,
        cond=None,
        cond_mask=None,
        design: CircuitDesign | None = None,
        Ps=None,
        *,
        eval_kernel: str | None = None,
    ) -> torch.Tensor:
        return self.execute(self.tokenizer(inputs), mask, cond, cond_mask, design, Ps, eval_kernel=eval_kernel)

    def execute(
        self,
        tokens: torch.Tensor,
        mask=None,
        cond=None,
        cond_mask=None,
        design: CircuitDesign | None = None,
        Ps=None,
        *,
        eval_kernel: str | None = None,
    ) -> torch.Tensor:
        """Everything after the tokenizer: ``forward(x) == execute(tokenizer(x))``. Dropping
        modules leaves the tokenizer unchanged, so the prune sweep tokenizes once and executes
        each smaller model on the same tokens (``nac.evaluation.predict_tokens``). ``Ps``: the
        design's ``graph.kernel_probabilities`` if already computed (a training step shares them with
        the regularizer).

        ``eval_kernel`` (keyword; ``KERNEL_MODES``): the kernel at evaluation for this call
        instead of ``config.eval_kernel``, the model and its config unchanged (``"dense"``: the
        kernel ablation, the same weights with all-to-all attention); ignored in training mode,
        as the config's is."""
        if eval_kernel is not None and eval_kernel not in KERNEL_MODES:
            raise ValueError(f"unknown eval_kernel {eval_kernel!r}; valid choices: {', '.join(KERNEL_MODES)}")
        B = tokens.shape[0]
        design = design or self.design(cond, cond_mask)
        c = self.config
        if c.input_latents:
            return self._execute_with_input_latents(tokens, mask, design, Ps, eval_kernel)
        codes = self.code_modulations(design)
        states = self.read_in(tokens, design.states, codes["processors"], mask)
        samplers, sample_op = self.graph.kernel_samplers(design, Ps, eval_kernel)
        procs = codes["processors"]
        for i, (layer, sample) in enumerate(zip(self.propagators, samplers)):
            K = None if sample is None else sample(B)
            # each layer its own entries by the same keys (Modulations.scope): one compiled graph for all
            states = layer(states, procs.scope(f"propagators.{i}.") if isinstance(procs, Modulations) else procs, K)
        K_out = None if sample_op is None else sample_op(B)
        return self.read_out(design.readout_states, states, codes["readout"], codes["processors"], K_out)

    def code_modulations(self, design: CircuitDesign, latent_codes: torch.Tensor | None = None) -> dict:
        """The code tensors the executor's layers read, by name: ``processors`` (``design.codes``),
        ``readout`` (``design.readout_codes``), ``latents`` (the input latents' codes) and
        ``senders`` (``[latents; processors]``, what the attention keys and values read with input
        latents; else the processors' codes).

        Each is a ``Modulations``, the modulations of every ModFC that reads that tensor in this
        forward computed together (``batched_modulations``: one matrix product per code tensor
        instead of a chain of ops per ModFC). The reference form, the tensors themselves with each
        ModFC computing its own, is ``nac/testing/reference_forms.py``'s ``per_layer_code_modulations``.
        Unmodulated models (Perceiver IO): the codes are ``None``."""
        with_latents = latent_codes is not None
        send = cat_modules(latent_codes, design.codes) if with_latents else design.codes
        codes = {"processors": design.codes, "readout": design.readout_codes, "latents": latent_codes, "senders": send}
        if design.codes is None:
            return codes
        readers = {name: [] for name in codes}
        send_name = "senders" if with_latents else "processors"
        readers["latents" if with_latents else "processors"] += modfcs(self.read_in)
        for layer, recv_name in [*((p, "processors") for p in self.propagators), (self.read_out, "readout")]:
            recv, send_fcs = layer.code_readers()
            readers[recv_name] += recv
            readers[send_name] += send_fcs
        out = {name: batched_modulations(codes[name], fcs) if fcs else codes[name] for name, fcs in readers.items()}
        if not with_latents:
            out["senders"] = out["processors"]
        return out

    def _execute_with_input_latents(
        self, tokens: torch.Tensor, mask, design: CircuitDesign, Ps=None, eval_kernel: str | None = None
    ) -> torch.Tensor:
        """``execute`` with ``input_latents = N > 0``: tokens ``[B, T, d_in]`` read into the input
        latents ``[B, N, d]``, which every propagator and the read-out receive from, through their
        kernels (``graph.executor_probabilities``; dense without signatures)."""
        B = tokens.shape[0]
        latent_codes, latent_states = self.input_latents()
        codes = self.code_modulations(design, latent_codes)
        latents = self.read_in(tokens, latent_states, codes["latents"], mask)  # [B, N, d]
        states = design.states.expand(B, *design.states.shape[-2:])  # [B, U_p, d]
        samplers, sample_op = self.graph.kernel_samplers(design, Ps, eval_kernel)
        for layer, sample in zip(self.propagators, samplers):
            K = None if sample is None else sample(B)
            states = layer(
                states,
                codes["processors"],
                K,
                latents=latents,
                latent_codes=codes["latents"],
                send_codes=codes["senders"],
            )
        K_out = None if sample_op is None else sample_op(B)
        return self.read_out(
            design.readout_states,
            torch.cat([latents, states], dim=1),
            codes["readout"],
            codes["senders"],
            K_out,
        )
