"""Claims of the baselines' own papers, checked on our runs of them: Neural Interpreters (Rahaman
et al. 2021) and Modular Networks (Kirsch et al. 2018)."""

from __future__ import annotations

import numpy as np

from nac.report.claims.deltas import accuracy_delta, delta_line
from nac.report.claims.fewshot import LOW_SHOTS, lowshot_pairs
from nac.report.claims.metrics import PIO, Missing, number
from nac.report.claims.registry import Context, claim
from nac.report.claims.rules import (
    NOT_SUPPORTED,
    SUPPORTED,
    _ci_text,
    _result,
    combine,
    difference_verdict,
    noninferiority_verdict,
    part,
    seed_ci,
    threshold_verdict,
)
from nac.stats import mean_ci

NI, MN = "neural_interpreter", "modular_network"
MN_COLLAPSE = 1.5  # exp(selection entropy) a layer must keep: 1 = all examples on one module
NI_SOURCE, MN_SOURCE = "Neural Interpreters (Rahaman et al. 2021)", "Modular Networks (Kirsch et al. 2018)"


@claim(
    "ni_matches_pio",
    source=NI_SOURCE,
    statement="Neural Interpreters match a non-modular baseline in distribution with fewer parameters",
    paper="their paper: on par with ViT-style baselines with fewer parameters",
    measure=lambda c: (
        f"d = IID Acc@1 {NI} − {PIO}; paired-by-seed CI; non-inferiority (lower bound > −δ), "
        f"δ = {accuracy_delta(c.params, 'iid'):g}; and fewer parameters"
    ),
    delta=lambda c: delta_line(c.params, "iid", why="the non-inferiority margin (a point)"),
)
def ni_matches_pio(c: Context) -> dict:
    m = c.m
    vals = m.image([NI, PIO], "iid_acc1")
    params_of = {
        r: [
            number(m.json(f"image/train/{r}-{s}.json"), "parameters", m.label(f"image/train/{r}-{s}.json"))
            for s in m.seeds
        ]
        for r in (NI, PIO)
    }
    iv = seed_ci(vals[NI], vals[PIO])
    fewer = params_of[NI][0] < params_of[PIO][0]
    counts = f"{int(params_of[NI][0]):,} vs {int(params_of[PIO][0]):,}"
    parts = [
        part("IID Acc@1 not worse by more than δ", noninferiority_verdict(iv, accuracy_delta(c.params, "iid"))),
        part("fewer parameters", (SUPPORTED if fewer else NOT_SUPPORTED, counts)),
    ]
    ours = f"d = {_ci_text(iv)}; {NI} {np.mean(vals[NI]):.2f} vs {PIO} {np.mean(vals[PIO]):.2f}; n = {iv.n} seed(s)"
    return _result(iv, combine(parts, "criteria"), ours + f"; parameters {counts}", parts=parts)


@claim(
    "ni_fewshot",
    source=NI_SOURCE,
    statement="Neural Interpreters adapt with fewer samples than a non-modular baseline",
    paper="their paper: few-shot curves",
    measure=lambda c: (
        f"d = few-shot Acc@1 {NI} − {PIO} (their fine-tuning protocol: new CLS token and head), "
        f"averaged over shots ≤ {LOW_SHOTS} per episode, pooled over the targets; paired t CI over (target, episode); "
        f"δ = {accuracy_delta(c.params, 'fewshot'):g}"
    ),
    delta=lambda c: delta_line(c.params, "fewshot", why="a practical threshold (their paper gives no number)"),
)
def ni_fewshot(c: Context) -> dict:
    targets = list(c.params.get("fewshot", {}).get("targets", []))
    if NI not in c.params.get("fewshot", {}).get("runs", []):
        raise Missing(f"fewshot.runs lacks {NI}")
    diffs, per_target = [], []
    for t in targets:
        d, means, _ = lowshot_pairs(c, t, NI, PIO)
        diffs += d
        per_target.append(f"{t}: {NI} {means[NI]:.2f} vs {PIO} {means[PIO]:.2f}")
    if not diffs:
        raise Missing("fewshot.targets is empty")
    iv = mean_ci(diffs)
    return _result(
        iv,
        difference_verdict(iv, accuracy_delta(c.params, "fewshot")),
        f"d = {_ci_text(iv)}; {'; '.join(per_target)}; n = {iv.n} (target, episode)",
    )


@claim(
    "mn_specialise",
    source=MN_SOURCE,
    statement="Modules specialise (module choice carries class information)",
    paper="their paper: modules specialise on input types",
    measure="per seed, mean over layers of I(controller's module; class) − the same with shuffled labels, on "
    "validation data; t CI over seeds; > 0",
    delta="δ = 0: a mutual information in nats against its shuffled-label control, no test-set noise floor",
)
def mn_specialise(c: Context) -> dict:
    usage = c.m.image_eval(MN, "modular_usage")
    gaps = [float(np.mean(np.asarray(u["mi"]) - np.asarray(u["mi_shuffled"]))) for u in usage]
    iv = mean_ci(gaps)
    per_layer = ", ".join(f"{a:.3f} vs {b:.3f}" for a, b in zip(usage[0]["mi"], usage[0]["mi_shuffled"]))
    ours = (
        f"I(module; class) − shuffled-label control, mean over layers: {_ci_text(iv, '{:+.4f}'.format)} nats; "
        f"per layer (seed {c.m.seeds[0]}): {per_layer}"
    )
    return _result(iv, difference_verdict(iv, delta=0.0), ours)


@claim(
    "mn_no_collapse",
    source=MN_SOURCE,
    statement="Modules do not collapse without regularisation",
    paper="their paper: EM avoids module collapse",
    measure=f"per seed, the smallest per-layer exp(entropy of the controller's module choices over validation data); "
    f"t CI over seeds; threshold {MN_COLLAPSE:g} (1 = collapse); and, since uniform routing (every module "
    f"alike, whatever the input) passes that trivially, the choices depend on the input: I(module; class) − "
    f"shuffled-label control > 0 (mean over layers, t CI over seeds, δ = 0); both",
    delta=f"the threshold {MN_COLLAPSE:g} (half a module's worth above 1 = collapse; a practical threshold) and δ = 0 "
    "for the mutual information (no test-set noise floor)",
)
def mn_no_collapse(c: Context) -> dict:
    usage = c.m.image_eval(MN, "modular_usage")
    low = [float(min(u["exp_entropy"])) for u in usage]
    iv = mean_ci(low)
    gap = mean_ci([float(np.mean(np.asarray(u["mi"]) - np.asarray(u["mi_shuffled"]))) for u in usage])
    parts = [
        part("modules used", threshold_verdict(iv, MN_COLLAPSE, fmt="{:.2f}".format)),
        part("routing depends on the input (beats uniform routing)", difference_verdict(gap, delta=0.0)),
    ]
    ours = (
        f"smallest per-layer exp(selection entropy) {_ci_text(iv, '{:.2f}'.format)} "
        f"(seed {c.m.seeds[0]}: {', '.join(f'{v:.2f}' for v in usage[0]['exp_entropy'])}); "
        f"I(module; class) − shuffled {_ci_text(gap, '{:+.4f}'.format)} nats (uniform routing: 0)"
    )
    return _result(iv, combine(parts, "criteria"), ours, threshold=True, parts=parts)
