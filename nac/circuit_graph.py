"""The NAC's circuit graph, a part the model owns (``nac.model.NAC.graph``): the kernels' link
probabilities ``P`` (eq. 2; one bandwidth per propagator, the read-out's, the graph's mean), the
graph regularizer against the prior's target, and the executor's kernel samplers (the Concrete
sample of SKMDPA, eq. 3).

``CircuitGraph`` is a plain object, not an ``nn.Module``: it holds a reference to its model and
no tensors of its own. It reads the model's current ``config``, ``design``, ``training``,
``generator``, ``input_latents``, ``propagators``, ``read_out``, the shared ``bandwidth``,
``prior_target`` and ``cpu_shortcuts`` at every call, so a device or dtype move of the model
(``model.to``, ``.double()``), a pruned copy or a loaded state dict is what it sees; the model's
parameter and buffer names (state dict, checkpoints, the weight-decay filter, the optimizer's
order) are those of a model without it. ``copy.deepcopy(model)`` (the EMA, module dropping) and
pickling copy the reference with the model: the copy's graph reads the copy."""

from __future__ import annotations

import torch

from nac.circuits.generators import CircuitDesign
from nac.circuits.kernel import KernelSampler, cosine_distance, cpu_shortcut, layer_kernel_biases, link_probabilities
from nac.circuits.layers import cat_modules
from nac.regularizer import graph_structure_loss


class CircuitGraph:
    """The kernels, their samplers and the graph regularizer of one ``nac.model.NAC``, ``model``
    (see the module): ``model.graph``, made by the model's constructor."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __repr__(self) -> str:
        return f"CircuitGraph(variant={self.config.variant!r})"

    @property
    def config(self):
        """The model's ``ModelConfig`` (read at each call: a few-shot copy may replace it)."""
        return self.model.config

    def kernel_bandwidth(self, layer: int | str | None = None) -> torch.Tensor:
        """The bandwidth ``eps`` (0-d) of propagator ``layer`` (0-based), of the read-out
        (``"readout"``), or of the graph (``None``: the mean over the propagators). With one shared
        bandwidth (``kernel_per_module=False``) every answer is that one."""
        m = self.model
        if not self.config.kernel_per_module:
            return m._parameters.get("bandwidth", m._buffers.get("bandwidth"))
        if layer is None:
            return torch.stack([p.bandwidth for p in m.propagators]).mean()
        return m.read_out.bandwidth if layer == "readout" else m.propagators[layer].bandwidth

    def bandwidth(self) -> float:
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
        design = design or self.model.design()
        if design.signatures is None:
            raise ValueError(f"variant {self.config.variant!r} has no signatures, so no link probabilities")
        if layer is not None or not self.config.kernel_per_module:
            return self._P(design.signatures, layer=layer)
        return torch.stack(list(self.kernel_probabilities(design).values())).mean(0)

    def kernel_probabilities(self, design: CircuitDesign) -> dict | None:
        """The propagators' ``P`` (eq. 2), ``{layer: P}``: one per propagator with
        ``kernel_per_module``, else ``{None: P}``; ``None`` for a design without signatures. A
        training step computes them once and passes them to ``NAC.execute`` and ``regularizer``
        (``nac.training.Objective``)."""
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

    def regularizer(
        self, design: CircuitDesign | None = None, Ps: dict | None = None, *, blas_threads: int | None = 1
    ) -> torch.Tensor:
        """Graph-structure regularizer between ``P`` and the prior's target (0 for other rungs);
        with a kernel per module, the sum over every propagator's kernel (the authors'; the
        read-out is not regularised). ``Ps``: the design's ``kernel_probabilities`` if already
        computed (then no design is drawn). The matching runs here, on the host
        (``nac.regularizer.graph_structure_loss``; ``blas_threads``: numpy's BLAS threads, default
        1, None: numpy's default; the same permutations and loss either way). A training step
        takes ``nac.training.Objective`` instead: the same loss, its matching on a worker thread
        while the forward runs."""
        if self.model.prior_target is None:
            return torch.zeros(())
        c = self.config
        if Ps is None:  # (given ``Ps``, no design is drawn: its noise would consume random numbers)
            design = design or self.model.design()
            Ps = self.kernel_probabilities(design)
        if c.generator == "conditional":
            return self.conditional_regularizer(design, Ps, blas_threads=blas_threads)
        kw = dict(kind=c.regularizer, matching=c.matching, blas_threads=blas_threads)
        return sum(graph_structure_loss(P, self.model.prior_target, **kw) for P in Ps.values())

    def layer_probabilities(self) -> torch.Tensor:
        """Every propagator's ``P`` of the unconditional design, stacked ``[L, U_p, U_p]`` (``[1,
        U_p, U_p]`` for one shared kernel): ``kernel_probabilities``' batched form, each entry the
        same as that layer's own (what a compiled step matches before its graph,
        ``nac.training.Objective.probabilities_in_advance``)."""
        sig = self.model.generator.signatures
        if self.config.kernel_per_module:
            return self._P(sig, layer=list(range(self.config.depth)), distance=cosine_distance(sig))
        return self._P(sig, layer=None, distance=cosine_distance(sig))[None]

    def kernel_mode(self, readout: bool = False, eval_kernel: str | None = None) -> str:
        """How the kernel is drawn: a Concrete sample in training with ``stochastic_kernel`` (the
        paper's SKMDPA; the read-out's only with ``sample_readout``), else ``P`` itself; at
        evaluation ``eval_kernel`` (this call's, from ``NAC.forward``), else the config's."""
        c = self.config
        if not self.model.training:
            return c.eval_kernel if eval_kernel is None else eval_kernel
        return "sample" if c.stochastic_kernel and (c.sample_readout or not readout) else "expectation"

    def conditional_regularizer(
        self, design: CircuitDesign, Ps: dict | None = None, *, blas_threads: int | None = 1
    ) -> torch.Tensor:
        """The regularizer on a conditional design (``generator_regularizer``; not in the paper,
        whose section 4.4 trains without one): the mean over samples of each sample's ``P``
        ``[U_p, U_p]`` (the graph's, ``link_probabilities``) against the prior's target, one
        matching per sample. ``Ps``: the design's ``kernel_probabilities`` if computed;
        ``blas_threads``: ``regularizer``'s."""
        Ps = Ps if Ps is not None else self.kernel_probabilities(design)
        P = torch.stack(list(Ps.values())).mean(0) if self.config.kernel_per_module else Ps[None]
        return torch.stack(
            [
                graph_structure_loss(
                    Pb,
                    self.model.prior_target,
                    kind=self.config.regularizer,
                    matching=self.config.matching,
                    blas_threads=blas_threads,
                )
                for Pb in P
            ]
        ).mean()

    def kernel_sampler(
        self, P: torch.Tensor | None, readout: bool = False, eval_kernel: str | None = None
    ) -> KernelSampler | None:
        """The model's kernel draw from one ``P``: ``sample_kernel(P, tau, B, mode)`` as
        ``sampler(B)``, ``P``'s logits computed once for all the draws from it (``KernelSampler``:
        sparse on the CPU with ``cpu_shortcuts``, else fixed-shape). Public so that a reference
        form may be given in its place (an attribute of this graph; ``nac.testing.reference_kernel``)."""
        if P is None:
            return None
        mode = self.kernel_mode(readout, eval_kernel)
        return KernelSampler(P, self.config.tau, mode=mode, cpu_shortcuts=self.model.cpu_shortcuts)

    def kernel_samplers(
        self, design: CircuitDesign, Ps: dict | None = None, eval_kernel: str | None = None
    ) -> tuple[list, KernelSampler | None]:
        """The model's kernel draws for every layer: the propagators' kernel samplers (one per
        layer) and the read-out's (``None`` for a dense graph): each propagator draws from its own
        kernel (``kernel_per_module``), or from one ``P`` whose logits are computed once, a fresh
        sample per layer. ``Ps``: the design's ``kernel_probabilities``, computed here if not
        given; ``eval_kernel``: ``NAC.execute``'s. Public so that a reference form may be given in its
        place (an attribute of this graph; ``nac.testing.reference_kernel``)."""
        c = self.config
        if design.signatures is None:
            return [None] * c.depth, None
        Ps, P_out = self.executor_probabilities(design, Ps)
        sample_op = self.kernel_sampler(P_out, readout=True, eval_kernel=eval_kernel)
        P0 = next(iter(Ps.values()))
        if P0.dim() == 2 and not cpu_shortcut(P0, self.model.cpu_shortcuts):  # CUDA's path: every layer's at once
            return self._layer_samplers(Ps, eval_kernel), sample_op
        samplers = [self.kernel_sampler(P, eval_kernel=eval_kernel) for P in Ps.values()]
        samplers = samplers if c.kernel_per_module else samplers * c.depth
        return samplers, sample_op

    def _layer_samplers(self, Ps: dict, eval_kernel: str | None = None) -> list:
        """``kernel_samplers``' propagator samplers for a shared design off the CPU's shortcuts: the
        first layer's call draws every layer's kernel ``[L, B, U, V]`` by one
        ``KernelSampler(layers=True)`` draw and computes every ``log K_hat`` by one chain of ops
        (``layer_kernel_biases``); each layer's call returns its own ``Kernel(bias=...)``. The same
        formula per layer as its own sampler and bias; the uniforms of layers ``1..L-1`` are drawn
        with layer 0's, before the drop-path draws between layers, so with drop-path the random
        stream is consumed in another order: independent draws either way, the same distribution
        (``tests/test_batched_kernels.py``; the per-layer form: ``nac/testing/reference_kernel.py``)."""
        c = self.config
        P = torch.stack(list(Ps.values())) if c.kernel_per_module else next(iter(Ps.values())).expand(c.depth, -1, -1)
        sampler = KernelSampler(
            P,
            c.tau,
            mode=self.kernel_mode(eval_kernel=eval_kernel),
            layers=True,
            cpu_shortcuts=self.model.cpu_shortcuts,
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

    def executor_probabilities(self, design: CircuitDesign, Ps: dict | None = None) -> tuple[dict, torch.Tensor]:
        """The ``P`` the executor samples its kernels from: ``({layer: P}, P_readout)``. Without
        input latents, the propagators' ``kernel_probabilities`` (``Ps`` if given) and the
        read-out's ``[(B,) U_o, U_p]``. With input latents that have signatures, the authors'
        kernel over the senders' concatenated signatures ``[input latents; processors]``: each
        layer's ``P`` is ``[(B,) U_p, N + U_p]``, its first ``N`` columns the links from the input
        latents by that layer's kernel (bandwidth, truncation; eq. 2 is elementwise, so this
        equals the kernel of the concatenation), the rest ``Ps``' (what the regularizer reads); the
        read-out's is ``[(B,) U_o, N + U_p]``."""
        Ps = Ps if Ps is not None else self.kernel_probabilities(design)
        latents = getattr(self.model, "input_latents", None)
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
