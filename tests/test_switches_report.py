"""The switch table of the report (nac.report.switches): every registered switch is shown, and the
measured effects are paired-by-seed differences switch − default, used only under the params the
bench ran with."""

import numpy as np
import pytest
from scipy import stats

from nac.report import switches as S

PARAMS = {
    "profile": "test",
    "seeds": [0, 1, 2],
    "prior": {"name": "scale_free", "params": {}},
    "data": {"shapes": {"n_train": 10}, "shapes_r": {"n_test": 5}},
    "image": {
        "dataset": "shapes",
        "val_split": "val",
        "ood_dataset": "shapes_r",
        "ood_split": "test",
        "model": {"d_model": 8},
        "train": {"epochs": 1},
    },
}


def _run(iid, ood, dense, sparsity, own, other):
    return (
        {"iid_acc1": iid, "ood_acc1": ood, "iid_acc1_dense": dense},
        {
            "sparsity": sparsity,
            "mean_p": 1 - sparsity,
            "distance": {"scale_free": own, "erdos_renyi": other, "ring_of_cliques": other + 1},
            "structure": {"scale_free": 0.5 - own, "erdos_renyi": 0.1, "ring_of_cliques": 0.1},
        },
    )


def _bench(per_seed):
    return {
        "params": S.bench_params(PARAMS),
        "switches": {
            name: {
                str(s): dict(zip(("eval", "mechanism"), (ev, {"final": mech}))) for s, (ev, mech) in per_seed.items()
            }
            for name in S.SWITCHES
        },
    }


def test_effects_are_paired_differences_switch_minus_default():
    defaults = {s: _run(50 + s, 20 + s, 40, 0.9, 0.01, 0.05) for s in (0, 1, 2)}
    switched = {s: _run(52 + 2 * s, 20, 40, 0.8, 0.02 + 0.001 * s, 0.05) for s in (0, 1, 2)}
    bench = _bench(switched)
    assert S.bench_status(bench, PARAMS) is None
    long = S.effects(bench, defaults, "scale_free", [0, 1, 2])
    row = long[(long.switch == f"truncation={S.SWITCHES['truncation']['value']}") & (long.effect == "IID Acc@1")].iloc[
        0
    ]
    a, b = [52, 54, 56], [50, 51, 52]
    ci = stats.ttest_rel(a, b).confidence_interval()
    assert row.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert (row.lo, row.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    links = long[(long.switch == "matching=search") & (long.effect == "links with P = 0 (%)")].iloc[0]
    assert links.difference == pytest.approx(-10.0)
    margin = long[(long.switch == "signature_fit=margin") & (long.effect == "nearest other − own distance")].iloc[0]
    assert margin.switched == pytest.approx(np.mean([0.05 - 0.02 - 0.001 * s for s in (0, 1, 2)]))
    table = S.switch_table(long)
    assert len(table) == len(S.registry())
    assert "IID Acc@1: +" in table[table.switch == "`truncation / learn_bandwidth / kernel_per_module`"].iloc[0, -1]
    assert table[table.switch == "`stochastic_kernel`"].iloc[0, -1] == "—"


def test_bench_used_only_under_its_own_params_and_seeds():
    bench = _bench({s: _run(50, 20, 40, 0.9, 0.01, 0.05) for s in (0, 1, 2)})
    assert S.bench_status(None, PARAMS).endswith("(python bench/bench_switches.py)")
    other = {**PARAMS, "image": {**PARAMS["image"], "model": {"d_model": 16}}}
    assert "other params or code" in S.bench_status(bench, other)
    stale = {**bench, "params": {**bench["params"], "code": "0" * 16}}  # trained by other code
    assert "other params or code" in S.bench_status(stale, PARAMS)
    more = {**PARAMS, "seeds": [0, 1, 2, 3]}
    assert "lacks switch" in S.bench_status(bench, more) and "[3]" in S.bench_status(bench, more)


def test_registry_rows_name_every_source():
    keys = [r["key"] for r in S.registry()]
    for name in S.SWITCHES:
        assert any(k.split(" / ")[0] == name for k in keys), name
