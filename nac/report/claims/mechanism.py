"""Claims on the mechanism (section 2, Figure 3, Appendix A): each learned graph follows its prior,
the regularizer keeps it sparse, the prior acts beyond initialisation, the kernel matters."""

from __future__ import annotations

import numpy as np

from nac.mechanism import DEGENERATE, degenerate_numbers
from nac.report.claims.deltas import accuracy_delta, delta_line
from nac.report.claims.metrics import AT_PLATEAU, Missing, number
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import SUPPORTED, UNDECIDED, _ci_text, _result, combine, difference_verdict, part
from nac.stats import paired_ci

# δ = 0 claims: a distance, a correlation or a share of links, not an accuracy on a test set
MECHANISM_DELTA = (
    "δ = 0: the measure (a graph distance, a correlation with the target, a share of links) is a property of "
    "the trained weights, with no test set and so no binomial noise floor; its seeds' spread is in the CI"
)

EMPTY_AT = 0.99  # share of links with P = 0 from which a learned graph counts as empty


def mech(c: Context, run: str, key: str, prior: str | None = None, phase: str = "final") -> list[float]:
    """Per seed, the mechanism number ``key`` of ``run``'s graph (``nac.mechanism.graph_numbers``);
    ``prior``: its entry for that target (``distance``, ``structure``, ``degree_distance``)."""
    where = c.m.label(f"image/train/{run}-<seed>.json")
    out = []
    for x in c.m.mechanism(run, phase):
        if prior is None:
            out.append(number(x, key, where))
            continue
        block = x.get(key) if isinstance(x, dict) else None
        if not isinstance(block, dict):
            raise Missing(f"{key} (the mechanism numbers of this code) in {where}")
        out.append(number(block, prior, where))
    return out


def dist(c: Context, run: str, target: str, phase: str = "final") -> list[float]:
    """Per seed, the distance of ``run``'s graph to the prior ``target`` (the regularizer's distance)."""
    return mech(c, run, "distance", target, phase)


def degenerate(c: Context, run: str, key: str, prior: str, phase: str = "final") -> dict[str, list[float]]:
    """Per seed, ``key`` (for ``prior``) of each degenerate graph at ``run``'s size: the empty and the
    complete graph, and the uniform graph at ``run``'s own density (``mean_p`` of that seed)."""
    n = int(c.params["image"]["model"]["n_processor"])
    out: dict[str, list[float]] = {kind: [] for kind in DEGENERATE}
    for mean_p in mech(c, run, "mean_p", phase=phase):
        for kind, nums in degenerate_numbers(n, mean_p).items():
            out[kind].append(float(nums[key][prior]))
    return out


def random_null(c: Context, target: str) -> list[float]:
    """Per seed, the ``structure`` towards ``target`` of a graph of random signatures (the random-signature
    control at initialisation): what the matching finds in noise."""
    ctrl = f"{c.head}-randinit"
    if ctrl not in c.ladder:
        raise Missing(f"the random-signature control {ctrl} (not in image.ladder): the structure null")
    return mech(c, ctrl, "structure", target, "init")


def against_degenerate(c: Context, run: str, target: str) -> list[tuple[str, str, str]]:
    """The parts that rule out the trivial graphs for ``run``'s graph: more of ``target``'s shape
    (``structure``) than the empty, the complete and the same-density uniform graph (each scores 0:
    a constant graph has no shape) and than a graph of random signatures (the matching's noise floor);
    paired by seed, δ = 0. Not the distance: for a sparse target the empty graph is close (0.002 to
    scale-free at 32 modules), closer than any untruncated kernel can come, so a distance rule would
    reward emptying the graph."""
    shape = mech(c, run, "structure", target)
    parts = []
    for kind, vals in degenerate(c, run, "structure", target).items():
        parts.append(part(f"{run} shape vs the {kind} graph", difference_verdict(paired_ci(shape, vals), delta=0.0)))
    null = paired_ci(shape, random_null(c, target))
    parts.append(part(f"{run} shape vs random signatures", difference_verdict(null, delta=0.0)))
    return parts


@claim(
    "graph_follows_prior",
    source="§2, §4.1 (Fig. 3)",
    statement="Each learned graph follows its own prior",
    paper="Figure 3 (learned graphs resemble their priors; no number)",
    measure="for each target T: (a) for each other NAC X, d = distance(P_X, T) − distance(P_NAC-T, T) at the end "
    "of training (the regularizer's distance: MSE after the closest permutation); (b) against the degenerate "
    "graphs, d = structure(P_NAC-T, T) − structure(G, T) for G the empty, the complete and the same-density "
    "uniform graph (0: no shape) and a graph of random signatures (the random-signature control at "
    "initialisation); structure: correlation with T after the matching; paired-by-seed CIs, δ = 0; supported "
    "when every comparison is",
    delta=MECHANISM_DELTA,
)
def graph_follows_prior(c: Context) -> dict:
    nac_runs = c.priors
    if len(nac_runs) < 2:
        raise Missing("fewer than 2 NAC priors in image.ladder")
    parts, closest_mean, closest_ci, beats_trivial, widest = [], 0, 0, 0, None
    for run in nac_runs:
        target = run[4:]
        own = dist(c, run, target)
        ivs = [(other, paired_ci(dist(c, other, target), own)) for other in nac_runs if other != run]
        verdicts = [part(f"{target}: {o} − {run}", difference_verdict(iv, delta=0.0)) for o, iv in ivs]
        trivial = against_degenerate(c, run, target)
        parts += verdicts + trivial
        closest_mean += all(iv.estimate > 0 for _, iv in ivs)  # the distance table's star
        closest_ci += all(v[1] == SUPPORTED for v in verdicts)
        beats_trivial += all(v[1] == SUPPORTED for v in trivial)
        low = min(ivs, key=lambda t: t[1].estimate)[1]
        widest = low if widest is None or low.estimate < widest.estimate else widest
    verdict = combine(parts, "comparisons")
    k = len(nac_runs)
    ours = (
        f"own target closest on average for {closest_mean} of {k} targets (the distance table's stars), by every "
        f"CI for {closest_ci} of {k}; more of its target's shape than the empty, complete, uniform and "
        f"random-signature graphs for {beats_trivial} of {k}; smallest margin (other − own distance) "
        f"{_ci_text(widest, '{:+.4f}'.format)}; n = {widest.n} seed(s)"
    )
    return _result(widest, verdict, ours, parts=parts)


@claim(
    "regularizer_sparse",
    source="§2, App. A",
    statement="The regularizer keeps the graph sparse and near its prior",
    paper="App. A: without the regularizer signatures collapse to an all-to-all graph",
    measure=lambda c: (
        f"against the regularizer-off control {c.head}-noreg (same seeds, same initial signatures): "
        f"d = expected share of sampled links, mean P (control − {c.head}, points) and d = distance to the "
        f"{c.prior} target (control − {c.head}); and not by emptying the graph: {c.head} has more of the "
        f"target's shape (structure) than the empty, complete and same-density uniform graphs and than random "
        f"signatures; paired-by-seed CIs, δ = 0; all must be > 0"
    ),
    delta=MECHANISM_DELTA,
)
def regularizer_sparse(c: Context) -> dict:
    head, prior, ctrl = c.head, c.prior, f"{c.head}-noreg"
    if ctrl not in c.ladder:
        raise Missing(f"the control {ctrl} (not in image.ladder)")
    dens = lambda run: [100 * v for v in mech(c, run, "mean_p")]
    iv_sp = paired_ci(dens(ctrl), dens(head))
    iv_d = paired_ci(dist(c, ctrl, prior), dist(c, head, prior))
    parts = [
        part("sparser (points of mean P)", difference_verdict(iv_sp, delta=0.0)),
        part("closer to the prior", difference_verdict(iv_d, delta=0.0)),
        *against_degenerate(c, head, prior),
    ]
    below = lambda run: 100 * np.mean(mech(c, run, "below_threshold"))
    ours = (
        f"mean P: {head} {np.mean(dens(head)):.1f}% vs {ctrl} {np.mean(dens(ctrl)):.1f}%, d = {_ci_text(iv_sp)}; "
        f"links with P < 0.5: {below(head):.1f}% vs {below(ctrl):.1f}%; distance to {prior}: control − NAC = "
        f"{_ci_text(iv_d, '{:+.4f}'.format)}; structure {np.mean(mech(c, head, 'structure', prior)):.3f} vs random "
        f"signatures {np.mean(random_null(c, prior)):.3f}; n = {iv_sp.n} seed(s)"
    )
    return _result(iv_sp, combine(parts, "measures"), ours, parts=parts)


@claim(
    "prior_beyond_init",
    source="§2",
    statement="The prior acts beyond initialisation",
    paper="implied (the prior is a training-time regularizer)",
    measure=lambda c: (
        f"the random-signature control {c.head}-randinit (regularizer on): d = distance to the {c.prior} target "
        f"at initialisation − at the end, and d = structure (correlation with the target after the matching) at "
        f"the end − at initialisation; paired-by-seed CIs; both > 0 (the regularizer moves a randomly initialised "
        f"graph towards its prior's shape, not only its density: an emptied graph lowers the distance to a sparse "
        f"target but has structure 0)"
    ),
    delta=MECHANISM_DELTA,
)
def prior_beyond_init(c: Context) -> dict:
    head, prior, ctrl = c.head, c.prior, f"{c.head}-randinit"
    if ctrl not in c.ladder:
        raise Missing(f"the control {ctrl} (not in image.ladder)")
    iv = paired_ci(dist(c, ctrl, prior, "init"), dist(c, ctrl, prior, "final"))
    shape = paired_ci(mech(c, ctrl, "structure", prior, "final"), mech(c, ctrl, "structure", prior, "init"))
    gap = paired_ci(dist(c, ctrl, prior), dist(c, head, prior))
    parts = [
        part("distance falls", difference_verdict(iv, delta=0.0)),
        part("structure rises", difference_verdict(shape, delta=0.0)),
    ]
    ours = (
        f"{ctrl}: distance to {prior} init − final = {_ci_text(iv, '{:+.4f}'.format)}; structure final − init = "
        f"{_ci_text(shape, '{:+.3f}'.format)}; at the end it is {_ci_text(gap, '{:+.4f}'.format)} farther than "
        f"{head}; n = {iv.n} seed(s)"
    )
    return _result(iv, combine(parts, "measures"), ours, parts=parts)


@claim(
    "kernel_matters",
    source="§2 (eq. 2-3)",
    statement="The kernel matters at evaluation",
    paper="implied (the kernel is the mechanism of every NAC result)",
    measure=lambda c: (
        f"per NAC prior and the frozen graph: d = IID Acc@1 with the kernel − with dense attention at "
        f"evaluation (same weights); paired-by-seed CI; δ = {accuracy_delta(c.params, 'iid'):g}; all models; undecided "
        f"where a learned graph is empty "
        f"(≥ {100 * EMPTY_AT:.0f}% of links with P = 0: isolating every module makes the kernel matter trivially; the "
        f"complete and uniform graphs fail by themselves, their kernel being dense attention)"
    ),
    delta=lambda c: delta_line(c.params, "iid", why="a practical threshold (the kernel should matter by a point)"),
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
        parts.append(part(run, difference_verdict(iv, accuracy_delta(c.params, "iid"))))
        ivs.append((run, iv))
        if run != "frozen_graph":  # a learned graph must exist: an empty one makes the kernel matter trivially
            cut = float(np.mean(mech(c, run, "sparsity")))
            if cut >= EMPTY_AT:
                empty = (UNDECIDED, f"{100 * cut:.1f}% of links cut (P = 0): an empty graph")
                parts.append(part(f"{run}'s graph", empty))
    name, low = min(ivs, key=lambda t: t[1].estimate)
    ours = f"smallest cost of removing the kernel: {name} {_ci_text(low)} points ({len(ivs)} models)"
    return _result(low, combine(parts, "models"), ours, parts=parts)


@claim(
    "kernel_matters_long",
    source="§2 (eq. 2-3)",
    statement="The kernel matters at evaluation, trained near the plateau",
    paper="implied (the kernel is the mechanism of every NAC result)",
    measure=lambda c: (
        f"{c.head}: d = IID Acc@1 with the kernel − with dense attention at evaluation (same weights), "
        f"after bench/bench_convergence.py's longest length with every seed; paired-by-seed CI; "
        f"δ = {accuracy_delta(c.params, 'iid'):g}"
    ),
    delta=lambda c: delta_line(c.params, "iid", why="a practical threshold (the kernel should matter by a point)"),
    when=lambda params: params.get("profile") not in AT_PLATEAU,  # (image.py's _longer_exists: no longer runs)
)
def kernel_matters_long(c: Context) -> dict:
    epochs, vals = c.m.longer([c.head], "iid_acc1", "iid_acc1_dense")  # both from the same runs
    iv = paired_ci(vals["iid_acc1"][c.head], vals["iid_acc1_dense"][c.head])
    ours = f"after {epochs} epochs: cost of removing the kernel {_ci_text(iv)} points; n = {iv.n} seed(s)"
    return _result(iv, difference_verdict(iv, accuracy_delta(c.params, "iid")), ours)
