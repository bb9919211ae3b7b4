"""Neural Attentive Circuits assembled: tokenizer -> circuit generator -> circuit executor
(read-in, L propagators, read-out). Every rung of the Table 1 ladder is a ``ModelConfig`` of
this one class (see ``nac.config.VARIANTS``)."""

from __future__ import annotations

import torch
import torch.nn as nn

from nac.baselines import ModularNetwork, ModularNetworkConfig, NeuralInterpreter, NeuralInterpreterConfig
from nac.circuits.attention import SKMDPA, layer_kernel_biases
from nac.circuits.generators import (
    CircuitDesign,
    ConditionalCircuitGenerator,
    InputLatents,
    PerceiverLatents,
    UnconditionalCircuitGenerator,
)
from nac.circuits.kernel import KERNEL_MODES, KernelSampler, cosine_distance, cpu_shortcut, link_probabilities
from nac.circuits.layers import Propagator, ReadOut, cat_modules
from nac.circuits.modfc import batched_modulations, configure_modfc, modfcs, name_modfcs
from nac.circuits.readin import ReadIn
from nac.circuits.tokenizers import build_tokenizer
from nac.config import ModelConfig
from nac.graphs import prior_target
from nac.regularizer import (
    graph_structure_loss,
    layer_losses_from_permutations,
    loss_from_permutation,
    match_async,
    match_stacked_async,
    stacked_permutations,
)
from nac.signatures import prior_signatures


class NAC(nn.Module):
    """``forward(inputs, mask=None, cond=None, cond_mask=None) -> logits [B, num_classes]``.

    inputs: whatever the tokenizer reads (images ``[B, 3, H, W]``, points ``[B, N, 3]``, token
    ids ``[B, T]``, ...); mask ``[B, T]`` bool marks real tokens; cond / cond_mask: what the
    conditional circuit generator reads.

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
    (over the whole row) as the processors' links (``_executor_probabilities``). The input
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

    def __init__(self, config: ModelConfig, fit_signatures: bool = True, *, cpu_shortcuts: bool = True):
        super().__init__()
        self.config = c = config
        self.cpu_shortcuts = cpu_shortcuts
        self.tokenizer = build_tokenizer(c.tokenizer)
        if c.variant == "perceiver_io":
            self.generator = PerceiverLatents(c.n_processor, c.n_readout, c.d_model)
        elif c.generator == "conditional":
            self.cond_tokenizer = build_tokenizer(c.cond_tokenizer)
            self.generator = ConditionalCircuitGenerator(
                c.n_processor,
                c.n_readout,
                c.d_model,
                c.d_code,
                c.d_sig,
                self.cond_tokenizer.d_out,
                c.generator_heads,
                c.ffn_mult,
                query_init=c.generator_query_init,
            )
        else:
            self.generator = UnconditionalCircuitGenerator(
                c.n_processor,
                c.n_readout,
                c.d_model,
                c.d_code,
                c.d_sig,
                use_signatures=c.uses_kernel,
                learn_signatures=c.variant == "nac",
                initial_state=c.initial_state,
                code_noise=c.code_noise,
                state_noise=c.state_noise,
            )
        has_kernel = c.uses_kernel or c.generator == "conditional"
        if c.input_latents:  # created only then: the default model's parameters and RNG draws are unchanged
            self.input_latents = InputLatents(
                c.input_latents,
                c.d_model,
                c.d_code,
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
        common = dict(modulated=c.modulated, gated=c.gated_ffn, alpha_init=c.alpha_init)
        self.read_in = ReadIn(self.tokenizer.d_out, c.d_model, c.d_code, c.readin_heads, ffn_mult=c.ffn_mult, **common)
        self.propagators = nn.ModuleList(
            Propagator(
                c.d_model,
                c.d_code,
                c.heads,
                c.ffn_mult,
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
            c.d_model,
            c.d_code,
            c.readout_heads,
            c.num_classes,
            c.ffn_mult,
            delta=c.delta,
            residual=c.readout_residual,
            norm=c.readout_norm,
            layer_scale=c.readout_layer_scale,
            cpu_shortcuts=cpu_shortcuts,
            **own_bw,
            **common,
        )
        if c.modulated:
            configure_modfc(self, c.modfc_norm_affine, c.modfc_gain)
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

    def kernel_bandwidth(self, layer: int | str | None = None) -> torch.Tensor:
        """The bandwidth ``eps`` (0-d) of propagator ``layer`` (0-based), of the read-out
        (``"readout"``), or of the graph (``None``: the mean over the propagators). With one shared
        bandwidth (``kernel_per_module=False``) every answer is that one."""
        if not self.config.kernel_per_module:
            return self._parameters.get("bandwidth", self._buffers.get("bandwidth"))
        if layer is None:
            return torch.stack([p.bandwidth for p in self.propagators]).mean()
        return self.read_out.bandwidth if layer == "readout" else self.propagators[layer].bandwidth

    def graph_bandwidth(self) -> float:
        """``kernel_bandwidth(None)`` as a float (what the mechanism numbers report)."""
        return float(self.kernel_bandwidth(None).detach())

    def link_probabilities(self, design: CircuitDesign | None = None, layer: int | None = None) -> torch.Tensor:
        """Processor-to-processor link probabilities ``P`` (eq. 2): ``[U_p, U_p]`` for an
        unconditional design, ``[B, U_p, U_p]`` for a conditional one.

        ``layer``: the ``P`` of that propagator's kernel. ``None``: **the model's graph**, the
        mean of the propagators' ``P`` (with one shared bandwidth, that ``P`` itself). Why the
        mean: every propagator's kernel is regularised towards the prior alike, their cut links
        are the same set (truncation compares the distance, not the bandwidth), so the mean has
        exactly their zeros; a module's expected degree in it is its mean degree over the layers
        that use it (what module dropping ranks by), and it equals each layer's ``P`` when the
        bandwidths agree (at initialisation)."""
        design = design or self.design()
        if design.signatures is None:
            raise ValueError(f"variant {self.config.variant!r} has no signatures, so no link probabilities")
        if layer is not None or not self.config.kernel_per_module:
            return self._P(design.signatures, layer=layer)
        return torch.stack(list(self.kernel_probabilities(design).values())).mean(0)

    def kernel_probabilities(self, design: CircuitDesign) -> dict | None:
        """The propagators' ``P`` (eq. 2), ``{layer: P}``: one per propagator with
        ``kernel_per_module``, else ``{None: P}``; ``None`` for a design without signatures. A
        training step computes them once and passes them to ``execute`` and ``graph_regularizer``
        (``logits_and_regularizer``)."""
        if design is None or design.signatures is None:
            return None
        d = cosine_distance(design.signatures)  # the same for every layer's kernel: computed once
        if not self.config.kernel_per_module:
            return {None: self._P(design.signatures, layer=None, distance=d)}
        layers = list(range(self.config.depth))  # every layer's P by one set of ops, [L, U_p, U_p]
        return dict(zip(layers, self._P(design.signatures, layer=layers, distance=d).unbind(0)))

    def _P(
        self, s_recv: torch.Tensor, s_send: torch.Tensor | None = None, layer: int | str | None = 0, distance=None
    ) -> torch.Tensor:
        """Eq. 2 with the kernel of propagator ``layer`` (or ``"readout"``) and the config's
        truncation (the read-out's only with ``truncate_readout``). The bandwidth is floored at
        1e-3: a step that drove it through 0 would flip the kernel. ``distance``: the signatures'
        ``cosine_distance`` if already computed. ``layer`` a list of propagators: their ``P``
        stacked, ``[L, U, V]`` (each entry the same as that layer's own)."""
        c = self.config
        truncation = c.truncation if layer != "readout" or c.truncate_readout else None
        if isinstance(layer, list):
            bandwidth = torch.stack([self.kernel_bandwidth(i) for i in layer]).view(-1, *[1] * s_recv.dim())
        else:
            bandwidth = self.kernel_bandwidth(layer)
        return link_probabilities(
            s_recv,
            s_send,
            bandwidth=bandwidth.clamp_min(1e-3),
            truncation=truncation,
            straight_through=c.straight_through,
            mode=c.truncation_mode,
            distance=distance,
        )

    def graph_regularizer(
        self,
        design: CircuitDesign | None = None,
        Ps: dict | None = None,
        pending: dict | None = None,
        perms: dict | None = None,
        *,
        blas_threads: int | None = 1,
    ) -> torch.Tensor:
        """Graph-structure regularizer between ``P`` and the prior's target (0 for other rungs);
        with a kernel per module, the sum over every propagator's kernel (the authors'; the
        read-out is not regularised). ``Ps``: the design's ``kernel_probabilities`` if already
        computed; ``pending``: their matchings started by ``match_async`` (else matched here);
        ``perms``: their permutations already known, ``{layer: LongTensor [U_p]}`` on the device
        (``matching_in_advance``; no host work here: what a compiled step traces).
        ``blas_threads``: numpy's BLAS threads where the matching runs here
        (``nac.regularizer.graph_structure_loss``; default 1, None: numpy's default); the same
        permutations and loss either way."""
        if self.prior_target is None:
            return torch.zeros(())
        c = self.config
        if Ps is None:  # (given ``Ps``, no design is drawn: its noise would consume random numbers)
            design = design or self.design()
            Ps = self.kernel_probabilities(design)
        if c.generator == "conditional":
            return self.conditional_graph_regularizer(design, Ps, blas_threads=blas_threads)
        if perms is not None or pending is not None:
            # matched before the step (a compiled step) or on the worker thread: the same loss as
            # matching here; every layer's at once (the per-layer sum: tests/test_batched_kernels.py)
            P = next(iter(Ps.values()))
            found = [perms[i] if perms is not None else pending[i].result() for i in Ps]
            if len(Ps) == 1:
                return loss_from_permutation(P, self.prior_target, found[0], kind=c.regularizer)
            return layer_losses_from_permutations(
                torch.stack(list(Ps.values())), self.prior_target, stacked_permutations(found, P.device), c.regularizer
            )
        kw = dict(kind=c.regularizer, matching=c.matching, blas_threads=blas_threads)
        return sum(graph_structure_loss(P, self.prior_target, **kw) for P in Ps.values())

    def match_async(self, Ps: dict | None) -> dict | None:
        """The regularizer's matchings of ``Ps`` (``kernel_probabilities``) started on a worker
        thread (``nac.regularizer.match_async``: ``P`` copied to pinned host memory without
        blocking, the target read from its host copy), ``{layer: Future}``; ``None`` where there
        is nothing to match here (no regularizer, no signatures, a conditional design)."""
        if self.prior_target is None or Ps is None or self.config.generator == "conditional":
            return None
        G = self._host_target()
        return {i: match_async(P, G, self.config.matching) for i, P in Ps.items()}

    def _host_target(self):
        """The prior's target as a float64 numpy array on the host, copied once per target
        tensor (a device move or a pruned model replaces the buffer, and the copy with it): the
        matching reads the constant target without a per-step device-to-host copy."""
        G = self.prior_target
        cached = self.__dict__.get("_target_on_host")
        if cached is None or cached[0] is not G:
            cached = self.__dict__["_target_on_host"] = (G, G.detach().to("cpu", torch.float64).numpy())
        return cached[1]

    def logits_and_regularizer(self, inputs, mask=None, cond=None, cond_mask=None, perms=None) -> tuple:
        """One training forward: ``(logits [B, num_classes], graph regularizer)`` from one circuit
        design, each propagator's ``P`` computed once and given to both; the regularizer's
        matching runs on a worker thread while the forward runs (``match_async``). The same
        logits, loss and gradients as ``forward`` then ``graph_regularizer`` of the same design
        (``tests/test_shared_link_probabilities.py``). ``perms``: the permutations of this
        step's ``P`` matched before the forward (``matching_in_advance``), then nothing here
        leaves the device: the form ``torch.compile`` traces as one graph (``train.compile``)."""
        design = self.design(cond, cond_mask)
        Ps = self.kernel_probabilities(design)
        pending = self.match_async(Ps) if perms is None else None
        logits = self(inputs, mask=mask, design=design, Ps=Ps)
        return logits, self.graph_regularizer(design, Ps, pending, perms)

    def logits_and_probabilities(self, inputs, mask=None, cond=None, cond_mask=None) -> tuple:
        """``logits_and_regularizer`` less the regularizer: ``(logits [B, num_classes], Ps)``,
        ``Ps`` the design's ``kernel_probabilities`` (``{layer: P [U_p, U_p]}``, differentiable;
        None without signatures). Finish with ``graph_regularizer(Ps=Ps, perms=...)``: the same
        logits and regularizer. What a compiled step with ``train.compile_matching: overlap``
        traces, so that the matching runs while the device runs the forward."""
        design = self.design(cond, cond_mask)
        Ps = self.kernel_probabilities(design)
        return self(inputs, mask=mask, design=design, Ps=Ps), Ps

    def probabilities_in_advance(self) -> torch.Tensor | None:
        """Every propagator's ``P`` the next training forward computes, stacked ``[L, U_p, U_p]``
        (``[1, U_p, U_p]`` for a shared kernel; ``kernel_probabilities``' batched form), without
        gradient; ``None`` where a step matches nothing. ``P`` depends only on the parameters
        (the signatures and bandwidths, no noise and no random draw), so it is computed from the
        same tensors by the same ops: the same values, so the same permutations as the forward's
        own matching. A conditional design's ``P`` depends on the input: refused (``ValueError``)."""
        if self.prior_target is None:
            return None
        if self.config.generator == "conditional":
            raise ValueError(
                "train.compile: a conditional circuit generator with generator_regularizer matches each "
                "sample's P inside the forward, which cannot be compiled as one graph; set train.compile: false"
            )
        sig = self.generator.signatures
        with torch.no_grad():
            if self.config.kernel_per_module:
                return self._P(sig, layer=list(range(self.config.depth)), distance=cosine_distance(sig))
            return self._P(sig, layer=None, distance=cosine_distance(sig))[None]

    def matching_in_advance(self, Ps: torch.Tensor | None = None) -> tuple | None:
        """The regularizer's matchings of the ``P`` the next training forward computes
        (``probabilities_in_advance``, or ``Ps``: those computed already, by the last compiled
        step), started now on the worker thread: ``(layers, Future)``, the Future's result every
        layer's permutation stacked (``match_stacked_async``: one copy each way); ``None`` where a
        step matches nothing. What a compiled step (``train.compile``) passes as ``perms``,
        keeping the host's numpy/scipy work out of the graph."""
        Ps = Ps if Ps is not None else self.probabilities_in_advance()
        if Ps is None:
            return None
        layers = list(range(self.config.depth)) if self.config.kernel_per_module else [None]
        return layers, match_stacked_async(Ps, self._host_target(), self.config.matching)

    def _kernel_mode(self, readout: bool = False, eval_kernel: str | None = None) -> str:
        """How the kernel is drawn: a Concrete sample in training with ``stochastic_kernel`` (the
        paper's SKMDPA; the read-out's only with ``sample_readout``), else ``P`` itself; at
        evaluation ``eval_kernel`` (this call's, from ``forward``), else the config's."""
        c = self.config
        if not self.training:
            return c.eval_kernel if eval_kernel is None else eval_kernel
        return "sample" if c.stochastic_kernel and (c.sample_readout or not readout) else "expectation"

    def conditional_graph_regularizer(
        self, design: CircuitDesign, Ps: dict | None = None, *, blas_threads: int | None = 1
    ) -> torch.Tensor:
        """The regularizer on a conditional design (``generator_regularizer``; not in the paper,
        whose section 4.4 trains without one): the mean over samples of each sample's ``P``
        ``[U_p, U_p]`` (the graph's, ``link_probabilities``) against the prior's target, one
        matching per sample. ``Ps``: the design's ``kernel_probabilities`` if computed;
        ``blas_threads``: ``graph_regularizer``'s."""
        Ps = Ps if Ps is not None else self.kernel_probabilities(design)
        P = torch.stack(list(Ps.values())).mean(0) if self.config.kernel_per_module else Ps[None]
        return torch.stack(
            [
                graph_structure_loss(
                    Pb,
                    self.prior_target,
                    kind=self.config.regularizer,
                    matching=self.config.matching,
                    blas_threads=blas_threads,
                )
                for Pb in P
            ]
        ).mean()

    def _sampler(
        self, P: torch.Tensor | None, readout: bool = False, eval_kernel: str | None = None
    ) -> KernelSampler | None:
        """``sample_kernel(P, tau, B, mode)`` as ``sampler(B)``, ``P``'s logits computed once for
        all the draws from it (``KernelSampler``: sparse on the CPU with ``cpu_shortcuts``, else
        fixed-shape)."""
        if P is None:
            return None
        mode = self._kernel_mode(readout, eval_kernel)
        return KernelSampler(P, self.config.tau, mode=mode, cpu_shortcuts=self.cpu_shortcuts)

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
        design's ``kernel_probabilities`` if already computed (a training step shares them with
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
        samplers, sample_op = self._samplers(design, Ps, eval_kernel)
        for layer, sample in zip(self.propagators, samplers):
            K = None if sample is None else sample(B)
            states = layer(states, codes["processors"], K)
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
        ModFC computing its own, is ``tests/reference_forms.py``'s ``per_layer_code_modulations``.
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

    def _samplers(
        self, design: CircuitDesign, Ps: dict | None = None, eval_kernel: str | None = None
    ) -> tuple[list, KernelSampler | None]:
        """The propagators' kernel samplers (one per layer) and the read-out's (``None`` for a
        dense graph): each propagator draws from its own kernel (``kernel_per_module``), or from
        one ``P`` whose logits are computed once, a fresh sample per layer. ``Ps``: the design's
        ``kernel_probabilities``, computed here if not given; ``eval_kernel``: ``execute``'s."""
        c = self.config
        if design.signatures is None:
            return [None] * c.depth, None
        Ps, P_out = self._executor_probabilities(design, Ps)
        sample_op = self._sampler(P_out, readout=True, eval_kernel=eval_kernel)
        P0 = next(iter(Ps.values()))
        if P0.dim() == 2 and not cpu_shortcut(P0, self.cpu_shortcuts):  # CUDA's path: every layer's kernel at once
            return self._layer_samplers(Ps, eval_kernel), sample_op
        samplers = [self._sampler(P, eval_kernel=eval_kernel) for P in Ps.values()]
        samplers = samplers if c.kernel_per_module else samplers * c.depth
        return samplers, sample_op

    def _layer_samplers(self, Ps: dict, eval_kernel: str | None = None) -> list:
        """``_samplers``' propagator samplers for a shared design off the CPU's shortcuts: the
        first layer's call draws every layer's kernel ``[L, B, U, V]`` by one
        ``KernelSampler(layers=True)`` draw and computes every ``log K_hat`` by one chain of ops
        (``layer_kernel_biases``); each layer's call returns its own ``KernelBias``. The same
        formula per layer as its own sampler and bias; the uniforms of layers ``1..L-1`` are drawn
        with layer 0's, before the drop-path draws between layers, so with drop-path the random
        stream is consumed in another order: independent draws either way, the same distribution
        (``tests/test_batched_kernels.py``; the per-layer form: ``tests/reference_kernel.py``)."""
        c = self.config
        P = torch.stack(list(Ps.values())) if c.kernel_per_module else next(iter(Ps.values())).expand(c.depth, -1, -1)
        sampler = KernelSampler(
            P, c.tau, mode=self._kernel_mode(eval_kernel=eval_kernel), layers=True, cpu_shortcuts=self.cpu_shortcuts
        )
        drawn = []

        def layer(i: int):
            def sample(B: int):
                if not drawn:
                    K = sampler(B)
                    drawn.extend([None] * c.depth if K is None else layer_kernel_biases(K, c.delta))
                return drawn[i]

            return sample

        return [layer(i) for i in range(c.depth)]

    def _executor_probabilities(self, design: CircuitDesign, Ps: dict | None = None) -> tuple[dict, torch.Tensor]:
        """The ``P`` the executor samples its kernels from: ``({layer: P}, P_readout)``. Without
        input latents, the propagators' ``kernel_probabilities`` (``Ps`` if given) and the
        read-out's ``[(B,) U_o, U_p]``. With input latents that have signatures, the authors'
        kernel over the senders' concatenated signatures ``[input latents; processors]``: each
        layer's ``P`` is ``[(B,) U_p, N + U_p]``, its first ``N`` columns the links from the input
        latents by that layer's kernel (bandwidth, truncation; eq. 2 is elementwise, so this
        equals the kernel of the concatenation), the rest ``Ps``' (what the regularizer reads); the
        read-out's is ``[(B,) U_o, N + U_p]``."""
        Ps = Ps if Ps is not None else self.kernel_probabilities(design)
        latents = getattr(self, "input_latents", None)
        s_in = None if latents is None else latents.signatures
        if s_in is None:
            return Ps, self._P(design.readout_signatures, design.signatures, layer="readout")
        s_p = design.signatures
        d_in = cosine_distance(s_p, s_in)  # [(B,) U_p, N], the same for every layer's kernel
        if self.config.kernel_per_module:
            layers = list(range(self.config.depth))
            P_in = dict(zip(layers, self._P(s_p, s_in, layer=layers, distance=d_in).unbind(0)))
        else:
            P_in = {None: self._P(s_p, s_in, layer=None, distance=d_in)}
        Ps = {i: torch.cat([P_in[i], P], dim=-1) for i, P in Ps.items()}
        return Ps, self._P(design.readout_signatures, cat_modules(s_in, s_p), layer="readout")

    def _execute_with_input_latents(
        self, tokens: torch.Tensor, mask, design: CircuitDesign, Ps=None, eval_kernel: str | None = None
    ) -> torch.Tensor:
        """``execute`` with ``input_latents = N > 0``: tokens ``[B, T, d_in]`` read into the input
        latents ``[B, N, d]``, which every propagator and the read-out receive from, through their
        kernels (``_executor_probabilities``; dense without signatures)."""
        B = tokens.shape[0]
        latent_codes, latent_states = self.input_latents()
        codes = self.code_modulations(design, latent_codes)
        latents = self.read_in(tokens, latent_states, codes["latents"], mask)  # [B, N, d]
        states = design.states.expand(B, *design.states.shape[-2:])  # [B, U_p, d]
        samplers, sample_op = self._samplers(design, Ps, eval_kernel)
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


BASELINES = {
    "neural_interpreter": (NeuralInterpreterConfig, NeuralInterpreter),
    "modular_network": (ModularNetworkConfig, ModularNetwork),
}


def build_model(
    config: ModelConfig | NeuralInterpreterConfig | ModularNetworkConfig | dict,
    fit_signatures: bool = True,
    *,
    cpu_shortcuts: bool = True,
) -> nn.Module:
    """Build a NAC (any rung of the ladder) or a baseline (``BASELINES``, by ``variant``) from its
    config or the config's dict form (what a checkpoint stores); ``fit_signatures=False`` skips
    the NAC's preset fit (the weights are loaded next). ``cpu_shortcuts``: the NAC's (``NAC``);
    the baselines have no CPU-only forms and ignore it."""
    if isinstance(config, dict):
        cls = BASELINES[config["variant"]][0] if config.get("variant") in BASELINES else ModelConfig
        config = cls.from_dict(config)
    if isinstance(config, ModelConfig):
        return NAC(config, fit_signatures=fit_signatures, cpu_shortcuts=cpu_shortcuts)
    return BASELINES[config.variant][1](config)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
