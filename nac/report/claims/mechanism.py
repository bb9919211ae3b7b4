"""Claims on the mechanism (section 2, Figure 3, Appendix A): each learned graph follows its prior,
the regularizer keeps it sparse, the prior acts beyond initialisation, the kernel matters."""

from __future__ import annotations

import numpy as np

from nac.report.claims.metrics import Missing, number
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import D1, SUPPORTED, _ci_text, _result, combine, difference_verdict
from nac.stats import paired_ci


def dist(c: Context, run: str, target: str, phase: str = "final") -> list[float]:
    """Per seed, the distance of ``run``'s graph to the prior ``target`` (the regularizer's distance)."""
    where = c.m.label(f"image/train/{run}-<seed>.json")
    return [
        number(x.get("distance") if isinstance(x, dict) else None, target, where) for x in c.m.mechanism(run, phase)
    ]


@claim(
    "graph_follows_prior",
    source="§2, §4.1 (Fig. 3)",
    statement="Each learned graph follows its own prior",
    paper="Figure 3 (learned graphs resemble their priors; no number)",
    measure="for each target T and each other NAC X: d = distance(P_X, T) − distance(P_NAC-T, T) at the end of "
    "training (the regularizer's distance: MSE after the closest permutation); paired-by-seed CI; supported "
    "when the NAC trained towards T is the closest for every target",
)
def graph_follows_prior(c: Context) -> dict:
    nac_runs = c.priors
    if len(nac_runs) < 2:
        raise Missing("fewer than 2 NAC priors in image.ladder")
    parts, closest, widest = [], 0, None
    for run in nac_runs:
        target = run[4:]
        own = dist(c, run, target)
        ivs = [(other, paired_ci(dist(c, other, target), own)) for other in nac_runs if other != run]
        verdicts = [(f"{target}: {o} − {run}", *difference_verdict(iv, delta=0.0)) for o, iv in ivs]
        parts += verdicts
        closest += all(v[1] == SUPPORTED for v in verdicts)
        low = min(ivs, key=lambda t: t[1].estimate)[1]
        widest = low if widest is None or low.estimate < widest.estimate else widest
    verdict = combine(parts, "comparisons")
    ours = (
        f"own target closest for {closest} of {len(nac_runs)} targets; smallest margin (other − own distance) "
        f"{_ci_text(widest, '{:+.4f}'.format)}; n = {widest.n} seed(s)"
    )
    return _result(widest, verdict, ours)


@claim(
    "regularizer_sparse",
    source="§2, App. A",
    statement="The regularizer keeps the graph sparse and near its prior",
    paper="App. A: without the regularizer signatures collapse to an all-to-all graph",
    measure=lambda c: (
        f"against the regularizer-off control {c.head}-noreg (same seeds, same initial signatures): "
        f"d = % links with P = 0 ({c.head} − control) and d = distance to the {c.prior} target "
        f"(control − {c.head}); paired-by-seed CIs; both must be > 0"
    ),
)
def regularizer_sparse(c: Context) -> dict:
    head, prior, ctrl = c.head, c.prior, f"{c.head}-noreg"
    if ctrl not in c.ladder:
        raise Missing(f"the control {ctrl} (not in image.ladder)")
    sp = lambda run: [
        100 * number(x, "sparsity", c.m.label(f"image/train/{run}-<seed>.json")) for x in c.m.mechanism(run, "final")
    ]
    iv_sp = paired_ci(sp(head), sp(ctrl))
    iv_d = paired_ci(dist(c, ctrl, prior), dist(c, head, prior))
    parts = [
        ("sparsity (points)", *difference_verdict(iv_sp, delta=0.0)),
        ("distance to the prior", *difference_verdict(iv_d, delta=0.0)),
    ]
    ours = (
        f"links with P = 0: {head} {np.mean(sp(head)):.1f}% vs {ctrl} {np.mean(sp(ctrl)):.1f}%, "
        f"d = {_ci_text(iv_sp)}; distance to {prior}: control − NAC = {_ci_text(iv_d, '{:+.4f}'.format)}; "
        f"n = {iv_sp.n} seed(s)"
    )
    return _result(iv_sp, combine(parts, "measures"), ours)


@claim(
    "prior_beyond_init",
    source="§2",
    statement="The prior acts beyond initialisation",
    paper="implied (the prior is a training-time regularizer)",
    measure=lambda c: (
        f"the random-signature control {c.head}-randinit (regularizer on): d = distance to the "
        f"{c.prior} target at initialisation − at the end; paired-by-seed CI; supported if > 0 (the "
        "regularizer moves a randomly initialised graph towards its prior)"
    ),
)
def prior_beyond_init(c: Context) -> dict:
    head, prior, ctrl = c.head, c.prior, f"{c.head}-randinit"
    if ctrl not in c.ladder:
        raise Missing(f"the control {ctrl} (not in image.ladder)")
    iv = paired_ci(dist(c, ctrl, prior, "init"), dist(c, ctrl, prior, "final"))
    gap = paired_ci(dist(c, ctrl, prior), dist(c, head, prior))
    ours = (
        f"{ctrl}: distance to {prior} init − final = {_ci_text(iv, '{:+.4f}'.format)}; at the end it is "
        f"{_ci_text(gap, '{:+.4f}'.format)} farther than {head}; n = {iv.n} seed(s)"
    )
    return _result(iv, difference_verdict(iv, delta=0.0), ours)


@claim(
    "kernel_matters",
    source="§2 (eq. 2-3)",
    statement="The kernel matters at evaluation",
    paper="implied (the kernel is the mechanism of every NAC result)",
    measure=f"per NAC prior and the frozen graph: d = IID Acc@1 with the kernel − with dense attention at "
    f"evaluation (same weights); paired-by-seed CI; {D1}; all models",
)
def kernel_matters(c: Context) -> dict:
    runs = [r for r in (*c.priors, "frozen_graph") if r in c.ladder]
    parts, ivs = [], []
    for run in runs:
        acc = c.m.image([run], "iid_acc1")[run]
        if not all("iid_acc1_dense" in c.m.json(f"image/eval/{run}-{s}.json") for s in c.m.seeds):
            raise Missing(f"iid_acc1_dense (the kernel ablation) in {c.m.label(f'image/eval/{run}-<seed>.json')}")
        dense = c.m.image([run], "iid_acc1_dense")[run]
        iv = paired_ci(acc, dense)
        parts.append((run, *difference_verdict(iv)))
        ivs.append((run, iv))
    name, low = min(ivs, key=lambda t: t[1].estimate)
    ours = f"smallest cost of removing the kernel: {name} {_ci_text(low)} points ({len(ivs)} models)"
    return _result(low, combine(parts, "models"), ours)


@claim(
    "kernel_matters_long",
    source="§2 (eq. 2-3)",
    statement="The kernel matters at evaluation, trained near the plateau",
    paper="implied (the kernel is the mechanism of every NAC result)",
    measure=lambda c: (
        f"{c.head}: d = IID Acc@1 with the kernel − with dense attention at evaluation (same weights), "
        f"after bench/bench_convergence.py's longest length with every seed; paired-by-seed CI; {D1}"
    ),
)
def kernel_matters_long(c: Context) -> dict:
    epochs, vals = c.m.longer([c.head], "iid_acc1", "iid_acc1_dense")  # both from the same runs
    iv = paired_ci(vals["iid_acc1"][c.head], vals["iid_acc1_dense"][c.head])
    ours = f"after {epochs} epochs: cost of removing the kernel {_ci_text(iv)} points; n = {iv.n} seed(s)"
    return _result(iv, difference_verdict(iv), ours)
