"""The link-probability kernel of SKMDPA (paper eq. 2), as in the authors' code.

``P_ij = exp(-d(s_i, s_j) / eps)`` with ``d = 1 - cos``: modules whose signatures point the same
way are likely to communicate. Details from the authors' code (``docs/reference.md``, "Kernel"
and "Switches"), which the paper does not state:

* **Truncation**: where ``d > truncation`` the link is cut, ``P = 0`` exactly (every Tiny-ImageNet
  template uses ``truncation = 0.9``). Two modes (``TRUNCATION_MODES``):

  - ``direct`` (the authors' default, ``nac``'s default): the cut is made in distance space
    (``d / eps`` becomes ``+inf``) and ``P = exp(-inf) = 0``. A cut pair gets **exactly zero
    gradient**, from the regularizer and from the attention alike; nothing pulls it back, and it
    reconnects only as a side effect of its endpoints' other links moving. Their
    ``straight_through`` flag (a straight-through step in distance space) changes nothing here,
    since the derivative of ``exp`` at ``-inf`` is 0.
  - ``masked`` (their non-default mode, what ``nac`` v1 did): ``P`` is computed untruncated and
    the cut entries are set to 0; with ``straight_through`` the forward pass uses the truncated
    value and the backward pass the untruncated one, so a cut pair receives the gradient of the
    untruncated ``P`` and can be pulled back; without it, zero gradient.
* **Learnable bandwidth**: ``eps`` is a learnable scalar; the authors keep one kernel, with its own
  bandwidth, per attention module (every propagator and the read-out; ``nac.model.NAC``,
  ``kernel_per_module``).

Without truncation ``P >= exp(-2 / eps)`` for every pair, and for unit signatures the mean
off-diagonal ``P`` is at least ``exp(-(1 + 1/(n-1)) / eps)`` (Jensen): 0.36 at ``eps = 1``, so the
graph cannot be sparse. With truncation at 0.9 a link is either absent or has
``P >= exp(-0.9 / eps)``.

``sample_kernel`` draws ``K ~ Concrete(P, tau)`` (the relaxed Bernoulli, reparameterised)
independently per example in training, with ``K = 0`` exactly where ``P = 0``; at evaluation the
kernel is ``P`` itself (``expectation``, the authors' default), ``P > 0.5`` (``threshold``), a
sample, or no kernel at all (``dense``: all-to-all attention, the kernel ablation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.distributions import RelaxedBernoulli

KERNEL_MODES = ("expectation", "threshold", "sample", "dense")
SAMPLER_IMPLS = ("sparse", "prepared")
TRUNCATION_MODES = ("direct", "masked")


def cpu_shortcut(t: torch.Tensor, enabled: bool) -> bool:
    """Whether a CPU-only fast form (the sparse kernel sample and its bias, explicit attention)
    may be taken for tensor ``t``: ``enabled`` (the owner's ``cpu_shortcuts``, ``NAC(...,
    cpu_shortcuts=)``), ``t`` on the CPU, and not while ``torch.compile`` traces. Off
    (``enabled=False``), the forms CUDA takes are taken on every device (no data-dependent shape,
    no host sync): what bench/bench_ops.py and the sync tests count on the CPU. Under
    ``torch.compile`` the CUDA forms are taken on every device: the shortcuts' data-dependent
    shapes break the graph (34 breaks in the tiny NAC's step) and recompile it when the number of
    links changes."""
    return enabled and t.device.type == "cpu" and not torch.compiler.is_compiling()


def cosine_distance(s_recv: torch.Tensor, s_send: torch.Tensor | None = None) -> torch.Tensor:
    """``d_ij = 1 - cos(s_i, s_j)`` in ``[0, 2]``, fp32 even under bf16 autocast; ``[..., U, V]``."""
    with torch.autocast(s_recv.device.type, enabled=False):
        n_recv = F.normalize(s_recv.float(), dim=-1)
        n_send = n_recv if s_send is None else F.normalize(s_send.float(), dim=-1)  # normalised once if shared
        cos = n_recv @ n_send.transpose(-1, -2)
        return 1.0 - cos.clamp(-1.0, 1.0)  # rounding can push cos(s, s) past 1, and P past 1


def link_probabilities(
    s_recv: torch.Tensor,
    s_send: torch.Tensor | None = None,
    bandwidth: float | torch.Tensor = 1.0,
    truncation: float | None = None,
    straight_through: bool = True,
    mode: str = "masked",
    distance: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 2: ``P_ij = exp(-(1 - cos(s_i, s_j)) / eps)``, cut to 0 where ``1 - cos > truncation``.

    s_recv: ``[..., U, d_sig]`` receiver signatures; s_send: ``[..., V, d_sig]`` sender
    signatures (defaults to ``s_recv``); bandwidth: a float or a scalar tensor (learnable).
    Returns ``[..., U, V]`` in [0, 1]. ``mode`` (``TRUNCATION_MODES``, see the module doc):
    ``direct`` gives cut pairs exactly zero gradient; ``masked`` with ``straight_through`` gives
    them the untruncated gradient. The function's default stays ``masked`` for its other callers
    (the Neural Interpreter baseline); the NAC passes its config's ``truncation_mode``.
    ``distance``: ``cosine_distance(s_recv, s_send)`` if already computed (several kernels, each
    with its own bandwidth, over one set of signatures: computed once for all).
    """
    if mode not in TRUNCATION_MODES:
        raise ValueError(f"unknown truncation mode {mode!r}; valid choices: {', '.join(TRUNCATION_MODES)}")
    d = cosine_distance(s_recv, s_send) if distance is None else distance
    with torch.autocast(d.device.type, enabled=False):
        if truncation is None:
            return torch.exp(-d / bandwidth)
        cut = d > truncation  # the authors compare d / eps with truncation / eps.detach(): the same set
        if mode == "direct":  # +inf distance, exp(-inf) = 0: value and gradient exactly 0 at cut pairs
            return torch.exp(-(d / bandwidth).masked_fill(cut, float("inf")))
        P = torch.exp(-d / bandwidth)
        P_cut = P.masked_fill(cut, 0.0)
        return P + (P_cut - P).detach() if straight_through else P_cut


def sample_kernel(
    P: torch.Tensor, tau: float, batch_size: int | None = None, mode: str = "sample"
) -> torch.Tensor | None:
    """Draw the kernel ``K`` from link probabilities ``P`` (eq. 2).

    P: ``[U, V]`` (shared design) or ``[B, U, V]`` (per-sample design). With ``mode="sample"``
    and a shared ``P``, ``batch_size`` independent samples are drawn, giving ``[B, U, V]``;
    truncated links (``P = 0``) stay exactly 0. ``expectation`` returns ``P``; ``threshold``
    returns ``(P > 0.5)`` as floats; ``dense`` returns ``None`` (no kernel: all-to-all attention).
    """
    if mode == "expectation":
        return P
    if mode == "threshold":
        return (P > 0.5).to(P.dtype)
    if mode == "dense":
        return None
    if mode != "sample":
        raise ValueError(f"unknown kernel mode {mode!r}; valid choices: {', '.join(KERNEL_MODES)}")
    if P.dim() == 2 and batch_size is not None:
        P = P.expand(batch_size, *P.shape)
    # RelaxedBernoulli clamps probabilities away from {0, 1}, so P_ii = 1 stays finite; the clamp
    # would also give cut links a tiny positive sample, so they are zeroed again.
    K = RelaxedBernoulli(torch.as_tensor(tau, dtype=P.dtype, device=P.device), probs=P).rsample()
    return torch.where(P > 0, K, torch.zeros((), dtype=K.dtype, device=K.device))


_LOG_FLOOR = 1e-30


class Kernel:
    """A kernel ``K`` (eq. 2) as attention reads it (eq. 3): the one type ``KernelSampler`` draws and
    ``SKMDPA`` and the layers take (``None`` there: no kernel, dense attention). It holds one of
    three forms of the same ``K``, and ``log_normalized`` gives eq. 3's ``log K_hat`` from each:

    * ``Kernel(values)``: ``K`` itself, ``[*lead, U, V]`` (CUDA's path; a non-sample evaluation
      kernel's ``P`` or ``P > 0.5``);
    * ``Kernel(values, links=sampler, shape=...)``: ``K``'s values on a shared ``P``'s linked entries
      only (``P > 0``, row-major; ``values [*lead, nnz]``, every other entry of ``K`` exactly 0),
      what ``KernelSampler(impl="sparse")`` draws on the CPU: with ~96% of the links cut (the
      paper's truncation at 256 modules) the bias is computed on the linked entries instead of by
      ~20 passes over ``[B, U, V]``;
    * ``Kernel(bias=...)``: ``log K_hat`` computed already, with every layer's
      (``layer_kernel_biases``), ``[B, 1, U, V]`` (a sample, broadcast over heads) or ``[U, V]``.

    ``dense()`` is ``K`` as a ``[*lead, U, V]`` tensor (the first two forms)."""

    def __init__(
        self,
        values: torch.Tensor | None = None,
        *,
        links: "KernelSampler | None" = None,
        shape: tuple | None = None,
        bias: torch.Tensor | None = None,
    ):
        if (values is None) == (bias is None) or (links is None) != (shape is None):
            raise ValueError("a Kernel holds values (with links and shape for the linked entries only) or a bias")
        self.values, self.links, self.bias = values, links, bias
        self.shape = tuple(shape) if shape is not None else tuple((values if bias is None else bias).shape)

    def dense(self) -> torch.Tensor:
        """``K`` ``[*lead, U, V]``."""
        if self.bias is not None:
            raise ValueError("this Kernel holds its log K_hat only (layer_kernel_biases), not K")
        if self.links is None:
            return self.values
        zeros = self.values.new_zeros(*self.shape[:-2], self.shape[-2] * self.shape[-1])
        return zeros.index_copy(-1, self.links.flat_index, self.values).view(self.shape)

    def log_normalized(self, delta: float = 1e-6, *, cpu_shortcuts: bool = True) -> torch.Tensor:
        """eq. 3's ``log K_hat`` ``[*lead, U, V]`` (``log_normalized_kernel``); for the linked
        entries only form computed on those where ``cpu_shortcut(values, cpu_shortcuts)``
        (``_sparse_log_normalized_kernel``), else made dense first; the bias form's as it is (its
        ``[B, 1, U, V]`` already broadcast over heads, as is its ``shape``)."""
        if self.bias is not None:
            return self.bias
        if self.links is not None and cpu_shortcut(self.values, cpu_shortcuts):
            bias = _sparse_log_normalized_kernel(self, delta)  # (CPU only: its checks sync with a device)
            if bias is not None:
                return bias
        return log_normalized_kernel(self.dense(), delta)

    def attention_bias(self, delta: float = 1e-6, *, cpu_shortcuts: bool = True) -> torch.Tensor:
        """``log_normalized``, broadcast over the attention heads: ``[B, 1, U, V]`` or ``[U, V]``."""
        if self.bias is not None:
            return self.bias
        bias = self.log_normalized(delta, cpu_shortcuts=cpu_shortcuts)
        return bias.unsqueeze(-3) if bias.dim() == 3 else bias


def log_normalized_kernel(K: torch.Tensor, delta: float = 1e-6) -> torch.Tensor:
    """``log K_hat`` of eq. 3, ``[..., U, V]``, from ``K`` as a tensor.

    The plain form is ``log(max(K_hat, 1e-30))`` (``nac/testing/reference_kernel.py``): entries with
    ``K = 0`` get a large negative finite value (-69.1, not ``-inf``) and a row with no links
    attends like dense attention instead of giving NaN. This returns the same except that, in
    rows with at least one entry above the floor, the floored entries are ``-inf``. Their
    softmax weight was ``exp(-69.1 + A_ij - A_max) <~ 1e-30`` of the row's largest, below
    float32 resolution unless scores differ by more than ~50, so outputs and gradients agree with
    the plain form to float tolerance (``tests/test_speed_equivalence.py``); rows with no entry
    above the floor are unchanged. Why it matters: those ~1e-30 weights turn into subnormal
    floats in the attention backward, and CPU matrix products on subnormals run many times
    slower. No data-dependent shape and no host sync (the CUDA path; ``tests/test_speed_sync.py``)."""
    K = K.float()
    K_hat = K / (delta + K.sum(dim=-1, keepdim=True))
    bias = torch.log(K_hat.clamp_min(_LOG_FLOOR))
    floored = K_hat.detach() <= _LOG_FLOOR
    return bias.masked_fill(floored & ~floored.all(dim=-1, keepdim=True), float("-inf"))


def _sparse_log_normalized_kernel(K: Kernel, delta: float) -> torch.Tensor | None:
    """``log_normalized_kernel(K.dense(), delta)`` from the linked entries alone:
    ``log(K_ij / (delta + sum_j K_ij))`` there, ``-inf`` on every cut link. The row sums run over
    the linked values (the other entries are exactly 0), so the result agrees with the dense form
    to float rounding (summation order). Where that form's special cases could arise (a row
    without links, or a linked entry at or below the floor) it returns None and the caller takes
    the dense form."""
    links = K.links
    if links.empty_rows:
        return None
    vals = K.values.float()
    lead = vals.shape[:-1]
    row_sum = vals.new_zeros(*lead, K.shape[-2]).index_add(-1, links.rows, vals)
    K_hat = vals / (delta + row_sum.index_select(-1, links.rows))
    if bool((K_hat.detach() <= _LOG_FLOOR).any()):
        return None
    bias = vals.new_full((*lead, K.shape[-2] * K.shape[-1]), float("-inf"))
    return bias.index_copy(-1, links.flat_index, torch.log(K_hat)).view(K.shape)


def layer_kernel_biases(K: Kernel, delta: float = 1e-6) -> list:
    """Every propagator's kernel as its ``log K_hat``, from their kernels ``K`` ``[L, (B,) U, V]``
    (one ``KernelSampler(layers=True)`` draw) by one chain of ops: ``[Kernel(bias=...)] * L``,
    layer ``l``'s equal to what ``SKMDPA`` computes from ``K[l]`` (``log_normalized_kernel`` runs
    along the last axis only, so each slice is computed as on its own). With input latents ``K``
    covers every sender, ``[input latents; processors]``. A dense graph (no ``K``) has no bias: the
    caller passes ``None`` to each layer instead."""
    bias = log_normalized_kernel(K.dense(), delta)
    bias = bias.unsqueeze(-3) if bias.dim() == 4 else bias  # [L, B, 1, U, V]: broadcast over heads
    return [Kernel(bias=b) for b in bias.unbind(0)]


class KernelSampler:
    """``sample_kernel(P, tau, batch_size, mode)`` for one ``P`` used by several layers, with
    the per-``P`` work done once: ``logit(P)`` (clamped as ``RelaxedBernoulli`` clamps it) and
    the link mask ``P > 0`` are computed at ``[U, V]`` here, not at ``[B, U, V]`` per layer, and
    no ``Distribution`` is built per draw (its argument validation scans ``P`` at batch size).

    A draw consumes the generator exactly as ``sample_kernel`` does (one ``torch.rand`` of the
    sample's shape, same dtype and device) and computes the same formula, ``K = clamp(sigmoid(
    (logit(u) + logit(p)) / tau), tiny, 1 - eps)`` zeroed where ``P = 0``; only the summation
    order of the two logits differs, so samples and gradients agree to float rounding
    (``tests/test_speed_equivalence.py``, against ``sample_kernel``, the plain form). A draw is a
    ``Kernel`` (``None`` for the ``dense`` mode).
    ``impl`` (``SAMPLER_IMPLS``; default: ``"sparse"`` where ``cpu_shortcut(P, cpu_shortcuts)``
    and ``P`` is shared, else ``"prepared"``): ``"prepared"`` (the CUDA path) computes the sample densely with
    fixed-shape masked ops, no data-dependent shape and no host sync (no ``nonzero``, boolean
    indexing or ``bool(tensor)``: ``tests/test_speed_sync.py``); ``"sparse"`` (a shared ``P``, on
    the CPU) returns the same sample as its values on the linked entries (``Kernel(values,
    links=)``). Both draw the same ``u`` and give the same values on the linked entries
    (elementwise, the same formula), and 0 elsewhere. ``"sparse"`` on another device than the CPU
    is taken as ``"prepared"`` (finding the linked entries syncs).

    ``layers=True``: ``P`` ``[L, U, V]`` holds the shared ``P`` of every propagator (one per
    layer), and a draw is every layer's sample at once, a ``Kernel`` ``[L, B, U, V]``: one ``torch.rand`` of
    that shape and one chain of elementwise ops instead of ``L`` (always ``"prepared"``). Layer
    ``l``'s slice is the same formula of its own ``P`` and of ``L * B * U * V`` independent
    uniforms, so its distribution is that of a per-layer draw (``NAC.graph.kernel_samplers``;
    ``tests/test_batched_kernels.py``).

    ``cpu_shortcuts`` (keyword; default True): whether the default ``impl`` may be the CPU's
    ``"sparse"`` (``cpu_shortcut``); False takes CUDA's ``"prepared"`` on every device. The
    NAC passes its own (``NAC(..., cpu_shortcuts=)``); an explicit ``impl`` overrides it."""

    def __init__(
        self,
        P: torch.Tensor,
        tau: float,
        mode: str = "sample",
        impl: str | None = None,
        layers: bool = False,
        *,
        cpu_shortcuts: bool = True,
    ):
        if impl is not None and impl not in SAMPLER_IMPLS:
            raise ValueError(f"unknown kernel sampler impl {impl!r}; valid choices: {', '.join(SAMPLER_IMPLS)}")
        if impl is None:
            impl = "sparse" if cpu_shortcut(P, cpu_shortcuts) else "prepared"
        if impl == "sparse" and (P.device.type != "cpu" or layers):  # nonzero / bool(...) would sync
            impl = "prepared"
        self.P, self.tau, self.mode, self.impl, self.layers = P, tau, mode, impl, layers
        if mode == "sample":
            fi = torch.finfo(P.dtype)
            self.linked = P > 0
            # sparse (CPU): logit(P) only where a link exists, every other entry of K is zeroed
            # anyway; prepared: on all of P (the clamp keeps a cut link's logit finite), then zeroed
            self.sparse = P.dim() == 2 and impl == "sparse"
            if self.sparse:  # the linked entries' positions in the flattened [U * V], row-major
                self.flat_index = self.linked.flatten().nonzero().squeeze(-1)
                self.rows = torch.div(self.flat_index, P.shape[-1], rounding_mode="floor")
                self.empty_rows = bool((~self.linked).all(-1).any())
            p = (P[self.linked] if self.sparse else P).clamp(min=fi.eps, max=1 - fi.eps)
            self.logits = p.log() - (-p).log1p()
            if layers:  # [L, 1, U, V]: broadcast over the batch axis of the draw
                self.logits, self.linked = self.logits.unsqueeze(1), self.linked.unsqueeze(1)

    def __call__(self, batch_size: int | None = None) -> Kernel | None:
        P = self.P
        if self.mode != "sample":  # (``layers``: P, P > 0.5 or None for every layer, [L, U, V])
            K = sample_kernel(P, self.tau, batch_size=None if self.layers else batch_size, mode=self.mode)
            return None if K is None else Kernel(K)
        shape = (batch_size, *P.shape) if P.dim() == 2 and batch_size is not None else P.shape
        if self.layers:  # every layer's sample by one draw, [L, B, U, V]
            shape = (P.shape[0], batch_size, *P.shape[1:]) if batch_size is not None else P.shape
        fi = torch.finfo(P.dtype)
        u = torch.rand(shape, dtype=P.dtype, device=P.device)  # the whole draw, as sample_kernel's
        if self.sparse:  # the formula on linked entries only (u[..., linked], by index)
            u = u.flatten(-2).index_select(-1, self.flat_index)
        u = u.clamp(min=fi.eps, max=1 - fi.eps)
        K = torch.sigmoid((u.log() - (-u).log1p() + self.logits) / self.tau).clamp(min=fi.tiny, max=1.0 - fi.eps)
        if self.sparse:
            return Kernel(K, links=self, shape=shape)
        return Kernel(torch.where(self.linked, K, torch.zeros((), dtype=K.dtype, device=K.device)))
