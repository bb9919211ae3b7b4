"""Issue 49: the read-in, propagator and read-out blocks, built in the forms the default template
(INET-110E-NC-CHONKER-BARAL-X, block by block) chooses, compute what the authors' BARAL-X code
computes: numbers, side by side, in float64.

Each block's computation in the authors' code is written out here again, independently, in plain
torch (``authors_*`` below), from reading their code in the read-only mirror of
github.com/mweiss17/NeuralAttentiveCircuits (``/work/.mirror/mweiss17+NeuralAttentiveCircuits/repo``,
commit 41ae372, the one ``nac/reference/templates/inet_baral_x.yaml`` records), with the settings
their template ``templates/INET-110E-NC-CHONKER-BARAL-X/Configurations/train_config.yml`` (cited as
``train_config.yml:LINE``) gives each block after their kwargs merging (``override``: a block's own
kwargs win, ``neural_attentive_circuits/utils.py:587-592``). Code paths below are relative to
``neural_attentive_circuits/`` in the mirror. The written-out forms take their tensors from OUR module
(``_fc``, ``_ln``: weights only); the constants (LayerNorm eps, the GEGLU split, the pooling) are the
authors', not read from our module.

Shapes: state width 48, head width 16, so the inner width (1 x 16 in the read-in and read-out,
4 x 16 = 64 in the propagator) differs from the state width, as BARAL-X's (1 x 64 and 8 x 64 against
384); code width 32; per-module codes; every parameter perturbed away from its initial value.

Every comparison has a negative control: the same comparison with one piece of the form changed (a
q/v bias, a residual around the read-out attention, none around the read-in's, the GEGLU halves
swapped, the kernel left out, a LayerScale) differs by far more than the tolerance.

The kernel: our ``log_normalized_kernel`` (nac/circuits/kernel.py) computes ``log K_hat`` in float32
whatever the input dtype (``K = K.float()``), so with a ``Kernel(K)`` the blocks agree with the
authors' float64 form to float32 rounding of that bias (~1e-7), not 1e-10; the tight comparisons hand
the attention the authors' log-affinities as ``Kernel(bias=...)``, and the kernel's normalisation is
compared with the authors' on its own (equal up to a per-row constant, which softmax ignores).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tiny_models import tiny_batch

from nac.circuits.attention import SKMDPA
from nac.circuits.kernel import Kernel, link_probabilities, sample_kernel
from nac.circuits.layers import Propagator, ReadOut, make_layer_scale
from nac.circuits.modfc import ModFC, ModFFN
from nac.circuits.readin import ReadIn
from nac.config import ModelConfig
from nac.model import NAC
from nac.reference import template

TIGHT = 1e-10  # float64, the same operations in another order
KERNEL_F32 = 1e-5  # with our float32 log K_hat (module docstring); the outputs are O(10)
CONTROL = 1e-3  # a changed form differs by at least this much

B, T, D_IN, D, D_CODE, E = 3, 10, 24, 48, 32, 16  # batch, tokens, token width, state, code, head width
U, U_OUT, CLASSES = 6, 4, 7  # processors, read-out modules, classes
LN_EPS = 1e-5  # nn.LayerNorm's and F.layer_norm's default: the authors' LayerNorms and ModFC scale norm


# ------------------------------------------------------------------------ tensors out of our modules
def _t(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.detach().clone()


def _fc(m: ModFC, bias: bool = True) -> dict:
    """A ModFC's tensors for ``authors_modfc``: W, b (None with ``bias=False``: the form without one),
    W_c and the gain."""
    return dict(W=_t(m.linear.weight), b=_t(m.linear.bias) if bias else None, Wc=_t(m.code_proj.weight), g=_t(m.alpha))


def _ln(m: nn.LayerNorm) -> dict:
    return dict(w=_t(m.weight), b=_t(m.bias))


def _ffn(norm: nn.LayerNorm, ffn: ModFFN) -> dict:
    return dict(ln=_ln(norm), fc1=_fc(ffn.fc1), fc2=_fc(ffn.fc2))


def _attn(attn: SKMDPA | ReadIn, qv_bias: bool = True) -> dict:
    return dict(q=_fc(attn.q, qv_bias), k=_fc(attn.k), v=_fc(attn.v, qv_bias), exit=_fc(attn.out))


def _perturb(module: nn.Module, seed: int) -> nn.Module:
    """float64, every parameter moved off its initial value (LayerNorm weights off 1, biases and
    gains off their constants), so that every tensor matters to the comparison."""
    module.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def _data(seed: int = 0):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return rand


# ------------------------------------------------------------------------ the authors' forms, written out
def authors_layer_norm(x: torch.Tensor, p: dict) -> torch.Tensor:
    """``nn.LayerNorm(dim)`` (its default eps 1e-5, affine), as every pre-norm of theirs is built
    (model/nc/attention.py:68-72, 289-290, 442)."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * p["w"] + p["b"]


def authors_modfc(x: torch.Tensor, code: torch.Tensor, p: dict) -> torch.Tensor:
    """Their ``ModFC._naive_implementation`` (utils.py:203-239) with BARAL-X's ``mod_fc_kwargs``
    (train_config.yml:82-85: ``add_one_to_scale: true``, ``learnable_scale_gain: true``,
    ``scale_gain: 0.1``) and the class defaults for the rest (utils.py:139, 144:
    ``scale_normalization_type 'ln'``, ``scale_times_input_normalization_type 'none'``, no activation):
    ``scale = 1 + g * layer_norm(W_c c)`` (F.layer_norm without weight or bias; W_c has no bias,
    utils.py:164), then ``W (x * scale) + b``. ``code`` ``[U, d_code]`` broadcasts against
    ``x [..., U, d_in]`` (their codes are per module)."""
    h = code @ p["Wc"].T
    mu = h.mean(-1, keepdim=True)
    h = (h - mu) / torch.sqrt(((h - mu) ** 2).mean(-1, keepdim=True) + LN_EPS)
    scale = p["g"] * h + 1.0
    y = (x * scale) @ p["W"].T
    return y if p["b"] is None else y + p["b"]


def authors_ffn(states: torch.Tensor, codes: torch.Tensor, p: dict, swap_geglu: bool = False) -> torch.Tensor:
    """Their ``ModFFN`` (model/nc/attention.py:423-479) as BARAL-X builds it in every block
    (``ffn_kwargs: use_geglu: true``, train_config.yml:96-97, 109-110, 118-119; ``ffn_capacity_factor:
    4``, :65; ``layer_scale_initial_value: null``, :73; ``path_drop_prob: 0.0``, :94):
    ``states + fc2(GEGLU(fc1(LayerNorm(states))))`` with ``fc1: d -> 2 * round(4 d)`` (:444-456,
    467-469), GEGLU ``x, gates = chunk(2); x * gelu(gates)`` (utils.py:377-380), the residual by their
    DropPath at rate 0 (``old + residual``, model/nc/utils.py:28-33), LayerScale(None) a no-op
    (model/nc/utils.py:48-56). ``swap_geglu``: the negative control (gelu on the first half)."""
    h = authors_modfc(authors_layer_norm(states, p["ln"]), codes, p["fc1"])
    x, gates = h.chunk(2, dim=-1)
    if swap_geglu:
        x, gates = gates, x
    h = x * F.gelu(gates)
    return states + authors_modfc(h, codes, p["fc2"])


def authors_read_in(
    tokens: torch.Tensor, states: torch.Tensor, codes: torch.Tensor, p: dict, heads: int, residual: bool = True
) -> torch.Tensor:
    """Their ``AttentiveReadIn`` (model/nc/attention.py:482-563): ``ReadInAttention`` (:248-420) then
    ``ModFFN``. BARAL-X's read-in (train_config.yml:108-116): 1 head of ``head_dim`` 64 (:66, 112),
    ``read_in_attention_kwargs: qkv_bias: false`` (:114-115, winning over the block-wide
    ``qkv_bias_in_attention``, utils.py:587-592), ``include_residual_in_read_in_attention: true``
    (:111), ``read_in_layer_scale_initial_value: null`` (:116), per-module key/value projectors
    (``share_key_value_projectors`` default False, attention.py:277).

    Their attention: LayerNorm the tokens (sender_layernorm, :289) and the states (:290, 353-354);
    repeat the tokens over the modules ``b v c -> b v u c`` (:363-365) and project them with each
    module's own code: ``k_uj = ModFC_k(x_j; c_u)``, ``v_uj = ModFC_v(x_j; c_u)`` (:367-368, heads
    ``b v u (h c) -> b h u v c``, :375-379); ``q_u = ModFC_q(h_u; c_u)`` (:381-382); scores
    ``q_u . k_uj / sqrt(head_dim)`` (:388-391), softmax over tokens (:393), ``sum_j a_uj v_uj``
    (:401-405), the exit ModFC ``inner -> d`` (:321-326, 408), LayerScale(None) (:411), residual
    (:414-415). No token mask: their read-in takes none (:335-343)."""
    b, u = states.shape[0], states.shape[1]
    x = authors_layer_norm(tokens, p["ln_tokens"])
    h = authors_layer_norm(states, p["ln_states"])
    x_u = x[:, :, None, :].expand(b, x.shape[1], u, x.shape[-1])  # b v u c
    keys = authors_modfc(x_u, codes, p["k"])  # b v u (h c)
    values = authors_modfc(x_u, codes, p["v"])
    keys, values = (t.unflatten(-1, (heads, -1)).permute(0, 3, 2, 1, 4) for t in (keys, values))  # b h u v c
    queries = authors_modfc(h, codes, p["q"]).unflatten(-1, (heads, -1)).transpose(1, 2)  # b h u c
    head_dim = queries.shape[-1]
    scores = torch.einsum("bhuc,bhuvc->bhuv", queries, keys) / math.sqrt(head_dim)
    weights = torch.softmax(scores, dim=-1)
    messages = torch.einsum("bhuv,bhuvc->bhuc", weights, values).transpose(1, 2).flatten(2)  # b u (h c)
    out = authors_modfc(messages, codes, p["exit"])
    states = states + out if residual else out
    return authors_ffn(states, codes, p["ffn"])


def authors_log_affinities_of_sample(K: torch.Tensor) -> torch.Tensor:
    """Their kernel's log-affinities in training (``mask_attn_scores_with_affinities: true``,
    train_config.yml:105, 128; ``stochastic_kernel: true``, :101, 124): ``return_log_kernel``
    (model/nc/attention.py:131-142) turns the sample ``K ~ RelaxedBernoulli(P, 0.5)`` into ``log K``
    (model/nc/kernels.py:164-178), then ``normalize_kernel_along_dim(-1)`` subtracts
    ``logsumexp`` over the senders (kernels.py:279-289, 343-347): ``log(K / sum_j K)``, no ``delta``.
    ``K`` ``[B, U, V]`` (a sample per example)."""
    log_k = K.log()
    return log_k - torch.logsumexp(log_k, dim=-1, keepdim=True)


def authors_log_affinities_at_eval(s_recv: torch.Tensor, s_send: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """At evaluation (``stochastic_eval_behaviour`` default ``no_sample``, kernels.py:33, 193-196): the
    log-kernel itself, ``-d / eps`` with ``d = 1 - cos`` of the unit signatures (kernels.py:297-331,
    ``_direct_truncate`` with ``truncation: null``, :211-228), normalised as in training."""
    d = 1.0 - F.normalize(s_recv, dim=-1) @ F.normalize(s_send, dim=-1).T
    log_k = -d / bandwidth
    return log_k - torch.logsumexp(log_k, dim=-1, keepdim=True)


def authors_latent_attention(
    recv: torch.Tensor,
    recv_codes: torch.Tensor,
    send: torch.Tensor,
    send_codes: torch.Tensor,
    p: dict,
    heads: int,
    log_affinities: torch.Tensor | None,
    share_layernorm: bool,
    residual: bool,
    layer_scale: float | None = None,
) -> torch.Tensor:
    """Their ``KernelModulatedLatentAttention.forward`` (model/nc/attention.py:110-244): pre-LayerNorm
    (one shared for receivers and senders with ``share_layernorm``, :156-161); ``k, v = ModFC(senders;
    sender codes)``, ``q = ModFC(receivers; receiver codes)`` (:165-168) at inner width ``heads x
    head_dim`` (:106-108), ``b u (h c) -> b h u c`` (:171-174); scores ``q . k / sqrt(head_dim)``
    (:177-178) plus the log-affinities, one ``[U, V]`` or ``[B, U, V]`` for all heads (:184-200);
    softmax over senders (:205); no post-softmax scaling (default False, :46); messages (:224-226);
    exit ModFC (:229); LayerScale (:232; None a no-op, model/nc/utils.py:48-56; ``layer_scale`` here is
    the negative control); the residual through DropPath at rate 0 (:235-236) or none (:237-241).
    Their q, k and v all carry ``qkv_bias`` (:74-94), False in BARAL-X."""
    ln_send = p["ln_recv"] if share_layernorm else p["ln_send"]
    h_recv, h_send = authors_layer_norm(recv, p["ln_recv"]), authors_layer_norm(send, ln_send)
    keys = authors_modfc(h_send, send_codes, p["k"])
    values = authors_modfc(h_send, send_codes, p["v"])
    queries = authors_modfc(h_recv, recv_codes, p["q"])
    queries, keys, values = (t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in (queries, keys, values))
    scores = torch.einsum("bhuc,bhvc->bhuv", queries, keys) / math.sqrt(queries.shape[-1])
    if log_affinities is not None:
        la = log_affinities[None, None] if log_affinities.dim() == 2 else log_affinities[:, None]
        scores = scores + la
    weights = torch.softmax(scores, dim=-1)
    messages = torch.einsum("bhuv,bhvc->bhuc", weights, values).transpose(1, 2).flatten(2)
    out = authors_modfc(messages, recv_codes, p["exit"])
    if layer_scale is not None:
        out = layer_scale * out
    return recv + out if residual else out


def authors_propagator(states, codes, p, heads, log_affinities, residual=True, layer_scale=None):
    """Their ``Propagator`` (model/nc/attention.py:631-714) as BARAL-X builds each of its 8 (:199-228
    of model/nc/block.py, every one with the same kwargs): ``latent_attention_kwargs`` (train_config.yml:
    98-107: ``qkv_bias: false``, ``share_layernorm: true``, ``mask_attn_scores_with_affinities: true``),
    ``include_residual_in_latent_attention`` default True (attention.py:643), ``num_heads: 8`` x
    ``head_dim: 64`` (:86, 66), ``layer_scale_initial_value: null`` (:73), ``path_drop_prob: 0.0``
    (:94); then the ModFFN. The mediators send to themselves (``disable_input_mediator_communication:
    true``, :63; model/nc/block.py:349-357): receivers = senders, one code per module."""
    states = authors_latent_attention(
        states, codes, states, codes, p["attn"], heads, log_affinities, True, residual, layer_scale
    )
    return authors_ffn(states, codes, p["ffn"])


def authors_read_out(out_states, out_codes, senders, send_codes, p, heads, log_affinities, residual=False):
    """Their ``ReadOut`` (model/nc/attention.py:724-780, a ``Propagator``) then ``OutputLatentPooling``
    (model/nc/tokenizers.py:92-143). BARAL-X's read-out (train_config.yml:117-133):
    ``include_residual_in_latent_attention: false`` (:120; the read-out states are the attention's
    output, attention.py:237-241), ``share_layernorm: false`` (:130: receivers and senders each their
    own LayerNorm), ``qkv_bias: false`` (:129), 1 head (:131) of 64, the ModFFN with its residual
    (attention.py:679), ``use_head: false`` (:133: the head is an Identity, attention.py:758-760, so
    ``pre_output_layernorm`` has no effect). The pooling (``output_tokenizer_type:
    OutputLatentPooling``, ``softmax_type: vanilla``, train_config.yml:140-142):
    ``confidence_scorer = Linear(d, 1)`` with its bias (tokenizers.py:107) on each latent's raw state,
    softmax over the latents at temperature 1 (:126-127, 135-137), the confidence-weighted sum of the
    states (:140), then ``to_logits = Linear(d, classes)`` (:108, 142)."""
    y = authors_latent_attention(
        out_states, out_codes, senders, send_codes, p["attn"], heads, log_affinities, False, residual
    )
    y = authors_ffn(y, out_codes, p["ffn"])
    confidences = (y @ p["score_w"].T + p["score_b"])[..., 0]  # b u
    confidences = torch.softmax(confidences / 1.0, dim=-1)
    selected = torch.einsum("buc,bu->bc", y, confidences)
    return selected @ p["logits_w"].T + p["logits_b"]


# ------------------------------------------------------------------------ our blocks in the BARAL-X forms
def _our_read_in(qkv_bias: bool = False) -> ReadIn:
    return _perturb(ReadIn(d_in=D_IN, d=D, d_code=D_CODE, heads=1, head_dim=E, qkv_bias=qkv_bias, gated=True), 1)


def _read_in_params(m: ReadIn, qv_bias: bool = True) -> dict:
    return dict(
        ln_tokens=_ln(m.norm_tokens),
        ln_states=_ln(m.norm_states),
        **_attn(m, qv_bias),  # the read-in's q, k, v and exit, as SKMDPA's
        ffn=_ffn(m.norm_ffn, m.ffn),
    )


def _our_propagator(qkv_bias: bool = False, layer_scale: float | None = None, cpu_shortcuts: bool = True):
    m = Propagator(
        d=D,
        d_code=D_CODE,
        heads=4,
        head_dim=E,
        qkv_bias=qkv_bias,
        gated=True,
        layer_scale=layer_scale,
        drop_path=0.0,
        cpu_shortcuts=cpu_shortcuts,
    )
    return _perturb(m, 2)


def _propagator_params(m: Propagator, qv_bias: bool = True) -> dict:
    return dict(attn=dict(ln_recv=_ln(m.norm_attn), **_attn(m.attn, qv_bias)), ffn=_ffn(m.norm_ffn, m.ffn))


def _our_read_out(residual: bool = False, qkv_bias: bool = False) -> ReadOut:
    m = ReadOut(
        d=D,
        d_code=D_CODE,
        heads=1,
        head_dim=E,
        num_classes=CLASSES,
        qkv_bias=qkv_bias,
        gated=True,
        residual=residual,
        norm=False,
        layer_scale=None,
    )
    return _perturb(m, 3)


def _read_out_params(m: ReadOut, confidence_bias: float) -> dict:
    return dict(
        attn=dict(ln_recv=_ln(m.norm_recv), ln_send=_ln(m.norm_send), **_attn(m.attn)),
        ffn=_ffn(m.norm_ffn, m.ffn),
        score_w=_t(m.confidence.weight),
        # ours has no bias (a shared bias cancels in the softmax over latents); the authors' has one: any value
        score_b=torch.tensor([confidence_bias], dtype=torch.float64),
        logits_w=_t(m.head.weight),
        logits_b=_t(m.head.bias),
    )


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float64
    return (a - b).abs().max().item()


def _kernel_sample(seed: int, n_recv: int, n_send: int) -> torch.Tensor:
    """A Concrete draw ``K ~ RelaxedBernoulli(P, 0.5)`` per example ``[B, U, V]`` from the link
    probabilities of random signatures (eq. 2, bandwidth 1, no truncation: BARAL-X's kernel)."""
    g = torch.Generator().manual_seed(seed)
    s_recv, s_send = torch.randn(n_recv, 8, generator=g), torch.randn(n_send, 8, generator=g)
    P = link_probabilities(s_recv, s_send, bandwidth=1.0).double()
    torch.manual_seed(seed)
    K = sample_kernel(P, tau=0.5, batch_size=B)
    return K.clamp_min(1e-6)  # away from 0, so that log K is finite in the authors' form


# ------------------------------------------------------------------------ read-in
@pytest.mark.parametrize("with_mask", [False, True])
def test_read_in_computes_the_authors_read_in_attention_with_per_module_keys_and_values(with_mask):
    """Our ``ReadIn`` (a folded fast route: scores on the tokens with the folded query, values summed
    before the value projection) computes the authors' ``AttentiveReadIn`` as BARAL-X builds it
    (``authors_read_in``: model/nc/attention.py:248-420, 423-479, 482-563; train_config.yml:108-116),
    whose keys and values are each module's own ModFC projections of the tokens (``b v u c``,
    attention.py:363-379), at a head width (16) other than the state width (48).

    With a token mask (ours takes one; the authors' read-in has none, attention.py:335-343), each
    sample's output equals the authors' read-in of that sample's real tokens alone."""
    ours = _our_read_in()
    rand = _data(10)
    tokens, states, codes = rand(B, T, D_IN), rand(U, D), rand(U, D_CODE)
    mask = None
    if with_mask:
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[0, 7:] = False
        mask[2, ::2] = False
    with torch.no_grad():
        got = ours(tokens, states, codes, mask)
    p = _read_in_params(ours)

    def authors(residual: bool) -> torch.Tensor:  # sample by sample, on its real tokens only
        real = [tokens[b : b + 1, mask[b]] if with_mask else tokens[b : b + 1] for b in range(B)]
        return torch.cat([authors_read_in(x, states[None], codes, p, heads=1, residual=residual) for x in real])

    assert _max_diff(got, authors(True)) < TIGHT
    # negative control: the same comparison without the attention residual (include_residual false)
    no_residual = authors(False)
    assert _max_diff(got, no_residual) > CONTROL


def test_read_in_with_qkv_bias_is_not_the_baral_x_form():
    """Negative control of the read-in: built with ``qkv_bias=True`` (q and v biases; TINY-INET-NC-X's
    form), our read-in no longer computes the authors' BARAL-X form (q, k, v without bias,
    train_config.yml:114-115) with the same weights; with the biases carried into the written-out form
    it does again (the biases are then the only difference, and the key has none on either side)."""
    ours = _our_read_in(qkv_bias=True)
    assert ours.q.linear.bias is not None and ours.v.linear.bias is not None and ours.k.linear.bias is None
    rand = _data(11)
    tokens, states, codes = rand(B, T, D_IN), rand(U, D), rand(U, D_CODE)
    with torch.no_grad():
        got = ours(tokens, states, codes)
    baral_x = authors_read_in(tokens, states.expand(B, U, D), codes, _read_in_params(ours, qv_bias=False), 1)
    assert _max_diff(got, baral_x) > CONTROL
    with_biases = authors_read_in(tokens, states.expand(B, U, D), codes, _read_in_params(ours), 1)
    assert _max_diff(got, with_biases) < TIGHT


# ------------------------------------------------------------------------ propagator
@pytest.mark.parametrize("cpu_shortcuts", [True, False])
def test_propagator_computes_the_authors_kernel_modulated_latent_attention_and_geglu_ffn(cpu_shortcuts):
    """Our ``Propagator`` (SKMDPA with a kernel, then the GEGLU ModFFN) computes the authors'
    ``Propagator`` as BARAL-X builds it (``authors_propagator``: model/nc/attention.py:110-244,
    423-479, 631-714; train_config.yml:63, 65-66, 73, 86, 94-107): one shared pre-LayerNorm, 4 heads
    of 16 (inner 64, state 48), exit layer, no LayerScale, residuals, drop-path 0, and the kernel as
    eq. 3's ``softmax(scores + log K_hat)``, theirs ``softmax(scores + log K - logsumexp log K)``
    (kernels.py:164-178, 279-289; attention.py:184-205): a per-example Concrete sample ``K``.

    Tight: the attention handed the authors' log-affinities (``Kernel(bias=...)``); then with our own
    ``Kernel(K)`` (its float32 ``log K_hat``, module docstring). Controls: no kernel; a q/v bias; the
    GEGLU halves swapped; a LayerScale 0.1 on both branches."""
    ours = _our_propagator(cpu_shortcuts=cpu_shortcuts)
    rand = _data(20)
    states, codes = rand(B, U, D), rand(U, D_CODE)
    K = _kernel_sample(21, U, U)
    la = authors_log_affinities_of_sample(K)
    p = _propagator_params(ours)
    want = authors_propagator(states, codes, p, 4, la)
    with torch.no_grad():
        got_tight = ours(states, codes, Kernel(bias=la[:, None]))
        got = ours(states, codes, Kernel(K))
        no_kernel = ours(states, codes, None)
    assert _max_diff(got_tight, want) < TIGHT
    assert _max_diff(got, want) < KERNEL_F32
    assert _max_diff(no_kernel, want) > CONTROL
    assert _max_diff(authors_propagator(states, codes, p, 4, None), no_kernel) < TIGHT  # dense: theirs without mask
    # negative controls of the form: GEGLU halves swapped, a LayerScale of 0.1
    h = authors_latent_attention(states, codes, states, codes, p["attn"], 4, la, True, True)
    assert _max_diff(got_tight, authors_ffn(h, codes, p["ffn"], swap_geglu=True)) > CONTROL
    assert _max_diff(got_tight, authors_ffn(h, codes, p["ffn"])) < TIGHT
    assert _max_diff(got_tight, authors_propagator(states, codes, p, 4, la, layer_scale=0.1)) > CONTROL


def test_propagator_at_evaluation_uses_the_authors_untruncated_log_kernel():
    """At evaluation the authors' kernel is the log-kernel ``-d / eps`` itself, normalised over the
    senders (``no_sample``, model/nc/kernels.py:193-196, 211-228, 279-289; ``truncation: null``,
    train_config.yml:103): our eval kernel ``expectation`` ``P = exp(-d / eps)`` (bandwidth 1, fixed:
    train_config.yml:100, kernels.py:25) through eq. 3 gives the same attention. Shared ``[U, U]``
    kernel, one for all examples and heads (attention.py:192-195)."""
    ours = _our_propagator()
    rand = _data(30)
    states, codes, sig = rand(B, U, D), rand(U, D_CODE), rand(U, 8)
    want = authors_propagator(states, codes, _propagator_params(ours), 4, authors_log_affinities_at_eval(sig, sig, 1.0))
    P = link_probabilities(sig, sig, bandwidth=1.0, truncation=None)
    with torch.no_grad():
        got = ours(states, codes, Kernel(P.double()))
    assert _max_diff(got, want) < KERNEL_F32
    # control: a bandwidth of 0.5 is another kernel
    la_other = authors_log_affinities_at_eval(sig, sig, 0.5)
    other = authors_propagator(states, codes, _propagator_params(ours), 4, la_other)
    assert _max_diff(got, other) > CONTROL


def test_kernel_normalisation_is_the_authors_up_to_a_row_constant():
    """eq. 3's ``log K_hat = log(K / (delta + sum_j K))`` (ours, ``Kernel.attention_bias``) against the
    authors' ``log K - logsumexp_j log K`` (model/nc/kernels.py:279-289): they differ by
    ``log(sum K / (delta + sum K))``, the same for every sender of a row, which softmax ignores; so the
    differences are constant along each row (to our float32 rounding of ``log K_hat``)."""
    K = _kernel_sample(40, U, U + 3)
    ours = Kernel(K).attention_bias(1e-6)[:, 0].double()  # [B, 1, U, V] -> [B, U, V]
    theirs = authors_log_affinities_of_sample(K)
    diff = ours - theirs
    assert (diff - diff.mean(-1, keepdim=True)).abs().max() < 1e-6
    assert diff.abs().max() < 1e-5  # and the constant itself ~ delta / sum K
    # control: an unnormalised log K differs from both by log sum K, not constant over the batch rows
    assert (K.log() - theirs).abs().max() > CONTROL


def test_propagator_with_qkv_bias_is_not_the_baral_x_form():
    """Negative control: with ``qkv_bias=True`` our propagator's q and v have biases, and the authors'
    BARAL-X form (``qkv_bias: false``, train_config.yml:106) with the same weights differs; carrying
    the biases over restores equality (their q, k, v would all carry one, attention.py:74-94; ours the
    key's never, which cancels in the softmax)."""
    ours = _our_propagator(qkv_bias=True)
    rand = _data(50)
    states, codes = rand(B, U, D), rand(U, D_CODE)
    la = authors_log_affinities_of_sample(_kernel_sample(51, U, U))
    with torch.no_grad():
        got = ours(states, codes, Kernel(bias=la[:, None]))
    assert _max_diff(got, authors_propagator(states, codes, _propagator_params(ours, qv_bias=False), 4, la)) > CONTROL
    assert _max_diff(got, authors_propagator(states, codes, _propagator_params(ours), 4, la)) < TIGHT


# ------------------------------------------------------------------------ read-out
def test_read_out_computes_the_authors_read_out_and_output_latent_pooling():
    """Our ``ReadOut`` (``residual=False``, ``norm=False``, ``layer_scale=None``, 1 head of 16, GEGLU)
    computes the authors' ``ReadOut`` + ``OutputLatentPooling`` as BARAL-X builds them
    (``authors_read_out``: model/nc/attention.py:110-244, 724-780; model/nc/tokenizers.py:92-143;
    train_config.yml:117-133): the read-out attention without residual, separate LayerNorms for
    receivers and senders, the kernel, the FFN, then the pooling.

    Ours puts the class Linear on every latent and sums the logits with the confidence weights; theirs
    pools the states first, then one Linear: equal because the weights sum to 1 (``sum_u w_u (W y_u +
    b) = W (sum_u w_u y_u) + b``), shown here on the read-out states themselves. Their confidence
    scorer has a bias (tokenizers.py:107), ours none: a shared bias cancels in the softmax over
    latents (two values of it give the same logits). Controls: a residual around the attention
    (nac v1's ``readout_residual``); the kernel left out."""
    ours = _our_read_out()
    rand = _data(60)
    out_states, out_codes = rand(U_OUT, D), rand(U_OUT, D_CODE)
    procs, proc_codes = rand(B, U, D), rand(U, D_CODE)
    K = _kernel_sample(61, U_OUT, U)
    la = authors_log_affinities_of_sample(K)
    with torch.no_grad():
        got_tight = ours(out_states, procs, out_codes, proc_codes, Kernel(bias=la[:, None]))
        got = ours(out_states, procs, out_codes, proc_codes, Kernel(K))
        no_kernel = ours(out_states, procs, out_codes, proc_codes, None)
    recv = out_states.expand(B, U_OUT, D)
    want = authors_read_out(recv, out_codes, procs, proc_codes, _read_out_params(ours, 0.7), 1, la)
    assert got.shape == (B, CLASSES)
    assert _max_diff(got_tight, want) < TIGHT
    assert _max_diff(got, want) < KERNEL_F32
    other_bias = authors_read_out(recv, out_codes, procs, proc_codes, _read_out_params(ours, -3.0), 1, la)
    assert _max_diff(want, other_bias) < TIGHT
    assert _max_diff(no_kernel, want) > CONTROL
    with_residual = authors_read_out(recv, out_codes, procs, proc_codes, _read_out_params(ours, 0.7), 1, la, True)
    assert _max_diff(got_tight, with_residual) > CONTROL

    # the class Linear after pooling == on every latent then the confidence-weighted sum
    p = _read_out_params(ours, 0.0)
    y = authors_latent_attention(recv, out_codes, procs, proc_codes, p["attn"], 1, la, False, False)
    y = authors_ffn(y, out_codes, p["ffn"])
    w = torch.softmax(y @ p["score_w"].T, dim=1)  # [B, U_o, 1]
    assert abs(w.sum(1) - 1).max() < 1e-12
    per_latent = (w * (y @ p["logits_w"].T + p["logits_b"])).sum(1)
    pooled = (w * y).sum(1) @ p["logits_w"].T + p["logits_b"]
    assert _max_diff(per_latent, pooled) < TIGHT
    assert _max_diff(per_latent, got_tight) < TIGHT
    # control: with weights that do not sum to 1 the two orders differ (the bias is counted sum w times)
    w2 = 2 * w
    per_latent2 = (w2 * (y @ p["logits_w"].T + p["logits_b"])).sum(1)
    assert _max_diff(per_latent2, (w2 * y).sum(1) @ p["logits_w"].T + p["logits_b"]) > CONTROL


def test_read_out_with_the_residual_is_not_the_baral_x_form():
    """Negative control: our read-out built with ``residual=True`` (nac v1) no longer computes the
    authors' BARAL-X read-out (``include_residual_in_latent_attention: false``, train_config.yml:120),
    but computes the written-out form with the residual put back."""
    ours = _our_read_out(residual=True)
    rand = _data(70)
    out_states, out_codes, procs, proc_codes = rand(U_OUT, D), rand(U_OUT, D_CODE), rand(B, U, D), rand(U, D_CODE)
    la = authors_log_affinities_of_sample(_kernel_sample(71, U_OUT, U))
    with torch.no_grad():
        got = ours(out_states, procs, out_codes, proc_codes, Kernel(bias=la[:, None]))
    recv, p = out_states.expand(B, U_OUT, D), _read_out_params(ours, 0.0)
    assert _max_diff(got, authors_read_out(recv, out_codes, procs, proc_codes, p, 1, la)) > CONTROL
    assert _max_diff(got, authors_read_out(recv, out_codes, procs, proc_codes, p, 1, la, residual=True)) < TIGHT


# ------------------------------------------------------------------------ the whole model's structure
def _attentions(model: NAC):
    return [m for m in model.modules() if isinstance(m, (SKMDPA, ReadIn))]


def _check_baral_x_structure(model: NAC) -> None:
    c = model.config
    d, hidden = c.d_model, round(4 * c.d_model)
    for m in _attentions(model):
        inner = m.heads * m.d_head
        assert m.q.linear.bias is None and m.k.linear.bias is None and m.v.linear.bias is None
        assert m.out.linear.bias is not None  # the exit layer keeps its bias (theirs: attention.py:95-100, 321-326)
        assert m.q.linear.weight.shape == (inner, d) and m.out.linear.weight.shape == (d, inner)
        assert m.k.linear.weight.shape[0] == m.v.linear.weight.shape[0] == inner
    ffns = [m for m in model.modules() if isinstance(m, ModFFN)]
    assert len(ffns) == c.depth + 2  # read-in, every propagator, read-out
    for f in ffns:
        assert f.gated and f.fc1.linear.weight.shape == (2 * hidden, d) and f.fc2.linear.weight.shape == (d, hidden)
    layer_scales = [m for m in model.modules() if type(m).__name__ == "LayerScale"]
    assert layer_scales == []
    for layer in [*model.propagators, model.read_out]:
        assert type(layer.scale_attn) is nn.Identity and type(layer.scale_ffn) is nn.Identity
    for layer in model.propagators:
        assert layer.drop_path.drop_prob == 0.0
        assert not hasattr(layer, "norm_send")  # one pre-LayerNorm for receivers and senders
    ro = model.read_out
    assert ro.residual is False and type(ro.norm_out) is nn.Identity and ro.confidence.bias is None
    assert ro.norm_recv is not ro.norm_send


def test_default_model_has_the_baral_x_block_structure():
    """``ModelConfig()``'s defaults are the default template's BARAL-X block forms, as recorded from the
    authors' template (nac/reference/templates/inet_baral_x.yaml: ``qkv_bias: false`` in every block,
    train_config.yml:106, 115, 129; GEGLU x 4, :65, 96-97, 109-110, 118-119; no LayerScale, :73, 116;
    drop-path 0, :94; read-out without residual, :120, scoring raw states, :132-133; ModFC ``1 + g
    LN(W_c c)`` with g learnable from 0.1, :82-85). The model built from them: no bias on q, k, v in
    any attention, the exit layer with one; q, k, v ``[heads x head_dim, d]``; GEGLU ``fc1`` of width
    ``2 x round(4 d)``; no LayerScale modules (``make_layer_scale(d, None)`` is ``nn.Identity``, their
    ``LayerScale(None)`` a no-op, model/nc/utils.py:48-56); drop-path 0."""
    ref = template("inet_baral_x")
    c = ModelConfig()
    for block in ("read_in", "propagators", "read_out"):
        assert ref[block]["qkv_bias"]["value"] is False and ref[block]["ffn_kind"]["value"] == "geglu"
        assert ref[block]["ffn_factor"]["value"] == 4
    assert c.qkv_bias is False and c.gated_ffn is True and c.ffn_mult == 4.0
    assert ref["propagators"]["layer_scale"]["value"] is None and c.layer_scale is None
    assert ref["read_out"]["layer_scale"]["value"] is None and c.readout_layer_scale is None
    assert ref["propagators"]["drop_path"]["value"] == 0.0 and c.drop_path == 0.0
    assert ref["read_out"]["residual"]["value"] is False and c.readout_residual is False
    assert ref["read_out"]["norm_before_pooling"]["value"] is False and c.readout_norm is False
    assert ref["modfc"]["gain_init"]["value"] == c.alpha_init == 0.1 and c.modfc_gain == "one_plus_alpha"
    assert c.modfc_norm_affine is False
    assert ref["read_in"]["heads"]["value"] == c.readin_heads == 1
    assert ref["read_out"]["heads"]["value"] == c.readout_heads == 1
    # make_layer_scale: None -> nn.Identity without parameters (control: a value -> a LayerScale with one)
    none, some = make_layer_scale(D, None), make_layer_scale(D, 0.1)
    assert type(none) is nn.Identity and list(none.parameters()) == []
    assert type(some).__name__ == "LayerScale" and len(list(some.parameters())) == 1

    model = NAC(c, fit_signatures=False)
    _check_baral_x_structure(model)
    for m in _attentions(model):  # head_dim None: d_model / heads, so the inner width is d_model
        assert m.heads * m.d_head == c.d_model
    # control: the check fails on a model built with q/v biases or a LayerScale
    for bad in (dict(qkv_bias=True), dict(layer_scale=0.1), dict(gated_ffn=False)):
        with pytest.raises(AssertionError):
            _check_baral_x_structure(NAC(ModelConfig(**bad), fit_signatures=False))


def test_head_dim_sets_the_inner_width_of_every_attention():
    """``ModelConfig(head_dim=...)`` (the authors' ``head_dim``, train_config.yml:66; their
    ``inner_dim = head_dim x num_heads``, model/nc/attention.py:106-108, 331-333): with d_model 48,
    4 propagator heads of 16 and 1 read-in / read-out head of 16, q, k, v are ``[heads x head_dim, d]``
    (64 x 48 in the propagators, 16 x 48 in the read-out, the read-in's k and v 16 x token width) and
    the exit layers map back to 48; the model runs."""
    c = ModelConfig(
        d_model=48,
        heads=4,
        head_dim=16,
        n_processor=8,
        n_readout=2,
        num_classes=5,
        d_sig=8,
        tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8},
    )
    model = NAC(c, fit_signatures=False)
    _check_baral_x_structure(model)
    for p in model.propagators:
        a = p.attn
        assert (a.heads, a.d_head) == (4, 16)
        assert a.q.linear.weight.shape == a.k.linear.weight.shape == a.v.linear.weight.shape == (64, 48)
        assert a.out.linear.weight.shape == (48, 64)
    a = model.read_out.attn
    assert a.q.linear.weight.shape == a.k.linear.weight.shape == a.v.linear.weight.shape == (16, 48)
    assert a.out.linear.weight.shape == (48, 16)
    ri, d_in = model.read_in, model.tokenizer.d_out
    assert ri.q.linear.weight.shape == (16, 48) and ri.k.linear.weight.shape == ri.v.linear.weight.shape == (16, d_in)
    assert ri.out.linear.weight.shape == (48, 16)
    x, _, kw = tiny_batch(model, B=2)
    model.eval()
    with torch.no_grad():
        logits = model(x, **kw)
    assert logits.shape == (2, 5) and torch.isfinite(logits).all()
