"""Few-shot heads of the baselines (nac.tracks.fewshot, "Baselines' few-shot heads"): the Neural
Interpreter's fine-tuning protocol and the Modular Network's new classifier, on a tiny synthetic
episode; and the NAC / Perceiver IO path untouched by the baselines' options."""

from __future__ import annotations

import copy

import pytest
import torch

from nac.baselines import ModularNetwork, ModularNetworkConfig, NeuralInterpreter, NeuralInterpreterConfig
from nac.baselines.fewshot import prepare_modular_network, prepare_neural_interpreter
from nac.registry import build_model
from nac.tracks import fewshot as fs

WAYS = 3


def ni_model(seed: int = 0, **kw) -> NeuralInterpreter:
    torch.manual_seed(seed)
    return NeuralInterpreter(
        NeuralInterpreterConfig(
            **dict(
                dict(
                    num_classes=10,
                    tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8, "norm": "batch"},
                    d_model=16,
                    d_type=8,
                    n_functions=3,
                    n_scripts=2,
                    n_iterations=2,
                    loc_layers=1,
                    heads=2,
                    mlp_mult=1.0,
                ),
                **kw,
            )
        )
    ).eval()


def mn_model(seed: int = 0) -> ModularNetwork:
    torch.manual_seed(seed)
    return ModularNetwork(
        ModularNetworkConfig(
            num_classes=10,
            conv_layers=[4, 4],
            pool_after=[0, 1],
            dense_layers=[8],
            modules_per_layer=3,
            dataset_size=20,
        )
    ).eval()


def episode(shots: int = 4, queries: int = 5, seed: int = 0):
    """A ``WAYS``-way episode: class = colour (red, green, blue), plus noise (uint8 images)."""
    g = torch.Generator().manual_seed(seed)
    colours = torch.tensor([[255, 0, 0], [0, 255, 0], [0, 0, 255]])

    def images(labels):
        x = colours[labels][:, :, None, None].expand(-1, -1, 32, 32)
        return (x + torch.randint(-30, 30, x.shape, generator=g)).clamp(0, 255).to(torch.uint8)

    y, qy = torch.arange(WAYS * shots) % WAYS, torch.arange(WAYS * queries) % WAYS
    return images(y), y, images(qy), qy


def cfg(**kw) -> fs.FewShotConfig:
    return fs.FewShotConfig(**dict(dict(ways=WAYS, shots=[4], steps=5, lr=1e-2, batch_size=8), **kw))


def trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


def check_adaptation(pre, model, expected_trainable: set[str], renamed: dict[str, str] | None = None):
    """Only ``expected_trainable`` train and change; every other parameter and buffer of the adapted
    model is bit-identical to the pre-trained model's; the pre-trained model is untouched."""
    assert trainable(model) == expected_trainable
    pre_sd = pre.state_dict()
    sd = model.state_dict()
    for name, value in sd.items():
        if any(name == t or name.startswith(t + ".") for t in expected_trainable) or name not in pre_sd:
            continue
        assert torch.equal(value, pre_sd[name]), f"frozen {name} changed"
    return sd


# ---------------------------------------------------------------------------------------- Neural Interpreter
NI_HEAD = {"cls_tokens.1", "head.norm.weight", "head.norm.bias", "head.linear.weight", "head.linear.bias"}


@pytest.mark.parametrize(
    "new_functions",
    [0, pytest.param(2, marks=pytest.mark.slow)],  # 2 new functions: ~17 s, in the slow run
)
def test_neural_interpreter_adapts_with_its_fine_tuning_protocol(new_functions):
    pre = ni_model()
    before = copy.deepcopy(pre.state_dict())
    x, y, qx, qy = episode()
    c = cfg(ni_new_functions=new_functions)
    start = prepare_neural_interpreter(pre, WAYS, 7, new_functions, c.freeze)
    model = fs.adapt(pre, x, y, c, seed=7)
    expected = set(NI_HEAD)
    if new_functions:
        expected |= {"scripts.0.functions.1.codes", "scripts.1.functions.1.codes"}
        assert model.config.added_functions == [new_functions]
    assert trainable(start) == expected
    check_adaptation(pre, model, expected)
    # the trained parameters moved from their fresh initialisation (same seed: same start)
    start_sd, sd = start.state_dict(), model.state_dict()
    for name in expected:
        assert not torch.equal(sd[name], start_sd[name]), f"{name} did not train"
    # the frozen tokenizer (BatchNorm statistics included) and the pre-trained model are untouched
    for k, v in pre.state_dict().items():
        assert torch.equal(v, before[k]), k
    tokens = pre.tokenizer.eval()(qx)
    with torch.no_grad():
        logits = model(tokens)
    assert logits.shape == (len(qy), WAYS) and torch.isfinite(logits).all()
    acc = fs.query_accuracy(model, qx, qy, pre.tokenizer)
    assert 0.0 <= acc <= 100.0
    # deterministic given the seed; another seed gives another head
    again = fs.adapt(pre, x, y, c, seed=7).state_dict()
    assert all(torch.equal(v, again[k]) for k, v in sd.items())
    other = fs.adapt(pre, x, y, c, seed=8).state_dict()
    assert not torch.equal(other["head.linear.weight"], sd["head.linear.weight"])


def test_neural_interpreter_precomputed_tokens_equal_plain_adaptation():
    """The frozen-tokenizer optimisation holds for the Neural Interpreter too."""
    pre = ni_model(1)
    x, y, qx, qy = episode(seed=1)
    fast = fs.adapt(pre, x, y, cfg(), seed=3, precompute_tokens=True)
    plain = fs.adapt(pre, x, y, cfg(), seed=3, precompute_tokens=False)
    assert isinstance(fast.tokenizer, torch.nn.Identity) and not isinstance(plain.tokenizer, torch.nn.Identity)
    plain_sd = plain.state_dict()
    for k, v in fast.state_dict().items():
        torch.testing.assert_close(v, plain_sd[k], rtol=1e-5, atol=1e-6)
    assert fs.query_accuracy(fast, qx, qy, pre.tokenizer) == fs.query_accuracy(plain, qx, qy)


@pytest.mark.slow  # ~5 s; the default run adapts the Neural Interpreter in test_neural_interpreter_adapts_...[0]
def test_neural_interpreter_learns_a_separable_episode():
    """Adaptation can fail: with only a CLS token and a head training, colour classes are learned
    (chance: 33%)."""
    pre = ni_model(2)
    x, y, qx, qy = episode(shots=8, queries=20, seed=2)
    model = fs.adapt(pre, x, y, cfg(steps=60, lr=5e-3, batch_size=64), seed=0)
    assert fs.query_accuracy(model, qx, qy, pre.tokenizer) >= 80.0


# ---------------------------------------------------------------------------------------- Modular Network
@pytest.mark.parametrize(
    "mode,extra",
    [
        ("head", set()),
        ("modules", {f"layers.{i}.{w}" for i in range(3) for w in ("weight", "bias")}),
    ],
)
def test_modular_network_adapts_a_new_head_over_frozen_layers(mode, extra):
    pre = mn_model()
    before = copy.deepcopy(pre.state_dict())
    x, y, qx, qy = episode()
    c = cfg(mn_train=mode)
    start = prepare_modular_network(pre, WAYS, 7, mode, c.freeze)
    model = fs.adapt(pre, x, y, c, seed=7)
    expected = {"head.weight", "head.bias"} | extra
    assert trainable(start) == expected and model.config.num_classes == WAYS
    sd = check_adaptation(pre, model, expected)
    start_sd = start.state_dict()
    for name in expected:
        assert not torch.equal(sd[name], start_sd[name]), f"{name} did not train"
    for i in range(3):  # the controller never trains (mode selection; no EM), nor does a*
        assert torch.equal(sd[f"layers.{i}.controller.weight"], before[f"layers.{i}.controller.weight"])
    assert torch.equal(sd["best_selection"], before["best_selection"])
    for k, v in pre.state_dict().items():
        assert torch.equal(v, before[k]), k
    with torch.no_grad():
        logits = model(qx)
    assert logits.shape == (len(qy), WAYS) and torch.isfinite(logits).all()
    assert 0.0 <= fs.query_accuracy(model, qx, qy) <= 100.0
    again = fs.adapt(pre, x, y, c, seed=7).state_dict()
    assert all(torch.equal(v, again[k]) for k, v in sd.items())


@pytest.mark.parametrize("mode", ["modules", "head"])
def test_modular_network_learns_a_separable_episode(mode):
    pre = mn_model(3)
    x, y, qx, qy = episode(shots=8, queries=20, seed=3)
    model = fs.adapt(pre, x, y, cfg(steps=60, lr=1e-2, batch_size=64, mn_train=mode), seed=0)
    assert fs.query_accuracy(model, qx, qy) >= 80.0  # chance: 33%


def test_adapt_and_evaluate_runs_every_model_kind(tiny_config):
    x, y, qx, qy = episode()
    for pre in (ni_model(), mn_model(), build_model(tiny_config(num_classes=10)).eval()):
        acc = fs.adapt_and_evaluate(pre, x, y, qx, qy, cfg(steps=2), seed=0)
        assert 0.0 <= acc <= 100.0


def test_input_size_of_each_model_kind(tiny_config):
    assert fs.input_size(build_model(tiny_config(tokenizer={"kind": "conv32", "dim": 16, "image_size": 32}))) == 32
    assert fs.input_size(build_model(tiny_config())) is None  # no image_size: no resizing (as before)
    assert fs.input_size(mn_model()) == 32
    assert fs.input_size(ni_model()) is None


# ---------------------------------------------------------------------------------------- NAC path untouched
@pytest.mark.parametrize("variant", ["nac", "perceiver_io"])
def test_baseline_options_do_not_touch_nac_and_perceiver_io(tiny_config, variant):
    """NAC and Perceiver IO keep their protocol (new head, all but ``freeze`` trains) whatever the
    baselines' options say: bit-identical fine-tuned weights."""
    torch.manual_seed(0)
    pre = build_model(tiny_config(variant=variant, num_classes=10)).eval()
    x, y, _, _ = episode()
    ref = fs.adapt(pre, x, y, cfg(), seed=4).state_dict()
    other = fs.adapt(pre, x, y, cfg(ni_new_functions=3, mn_train="modules"), seed=4).state_dict()
    assert ref.keys() == other.keys() and all(torch.equal(v, other[k]) for k, v in ref.items())
    model, freeze = fs._prepare(pre, cfg(), seed=4)
    assert freeze == ["tokenizer"]
    assert model.read_out.head.out_features == WAYS
    assert trainable(model) == {n for n, _ in model.named_parameters() if not n.startswith("tokenizer.")}


def test_fewshot_config_rejects_bad_baseline_options():
    with pytest.raises(ValueError, match="ni_new_functions"):
        fs.FewShotConfig(ni_new_functions=-1)
    with pytest.raises(ValueError, match="mn_train"):
        fs.FewShotConfig(mn_train="controller")
    with pytest.raises(ValueError, match="valid choices: head, modules"):
        prepare_modular_network(mn_model(), WAYS, 0, train="controller")


# ---------------------------------------------------------------------------------------- params
def test_fewshot_runs_accept_the_baselines():
    from nac.compose import validate_all as validate_tracks
    from nac.pipeline.params import ParamsError, compose
    from nac.pipeline.paths import fewshot_image_run

    p = compose(["profile=smoke"])
    p["fewshot"]["runs"] = ["perceiver_io", "nac", "neural_interpreter", "modular_network"]
    p["image"]["ladder"] = sorted(set(p["image"]["ladder"]) | {"neural_interpreter", "modular_network"})
    validate_tracks(p)
    assert [fewshot_image_run(p["prior"], r) for r in p["fewshot"]["runs"]] == [
        "perceiver_io",
        f"nac-{p['prior']['name']}",
        "neural_interpreter",
        "modular_network",
    ]
    p["fewshot"]["protocol"] = dict(p["fewshot"]["protocol"], ni_new_functions=2, mn_train="modules")
    validate_tracks(p)
    p["fewshot"]["protocol"]["mn_train"] = "controller"
    with pytest.raises(ParamsError, match="mn_train"):
        validate_tracks(p)
    p["fewshot"]["protocol"]["mn_train"] = "head"
    p["fewshot"]["runs"] = ["nac", "transformer"]
    with pytest.raises(
        ParamsError,
        match=r"fewshot\.runs\[1\]='transformer': Input should be .*'neural_interpreter' or 'modular_network'",
    ):
        validate_tracks(p)


def test_baselines_are_rejected_with_pretrained_sources():
    """The paper profile pre-trains its few-shot models on ImageNet (``source: pretrain``); the
    baselines have no such pre-training, so naming them there is an error that says so."""
    from nac.compose import validate_all
    from nac.pipeline.params import ParamsError, compose

    p = compose(["profile=paper"])
    assert p["fewshot"]["source"] == "pretrain"
    validate_all(p)
    p["fewshot"]["runs"] = ["perceiver_io", "nac", "neural_interpreter"]
    with pytest.raises(ParamsError, match="image track's checkpoints only"):
        validate_all(p)


# ---------------------------------------------------------------------------------------- report
def _rows(runs, episodes=4, shots=(1, 2, 4)):
    rng = torch.Generator().manual_seed(0)
    return [
        {"target": "digits", "run": r, "shots": k, "episode": e, "acc1": float(torch.rand((), generator=rng) * 100)}
        for r in runs
        for k in shots
        for e in range(episodes)
    ]


def test_fewshot_stats_and_table_carry_the_baselines_paired_with_perceiver_io():
    import pandas as pd

    from nac.report import tables
    from nac.report.published import RUN_LABELS

    two = _rows(["perceiver_io", "nac"])
    four = two + _rows(["neural_interpreter", "modular_network"])[::-1]
    base, st = tables.fewshot_stats(two), tables.fewshot_stats(four)
    # the NAC / Perceiver IO rows are the same with or without the baselines
    pd.testing.assert_frame_equal(st[st["run"].isin(base["run"])].reset_index(drop=True), base)
    assert list(tables.fewshot_table({"digits": base}).columns) == [
        "target",
        "shots",
        "episodes",
        "Perceiver IO",
        "NAC",
        "NAC − Perceiver IO (paired)",
    ]
    df = pd.DataFrame(four)
    for b in ("neural_interpreter", "modular_network"):
        for k in (1, 2, 4):
            acc = {
                r: df[(df["run"] == r) & (df["shots"] == k)].sort_values("episode")["acc1"].to_numpy()
                for r in (b, "perceiver_io")
            }
            got = st[(st["shots"] == k) & (st["run"] == f"{b}_minus_perceiver_io")].iloc[0]
            assert got["mean"] == pytest.approx((acc[b] - acc["perceiver_io"]).mean()) and got["n"] == 4
    table = tables.fewshot_table({"digits": st})
    assert {
        RUN_LABELS["neural_interpreter"],
        "Neural Interpreter − Perceiver IO (paired)",
        RUN_LABELS["modular_network"],
        "Modular Network − Perceiver IO (paired)",
    } <= set(table.columns)
    assert table.notna().all().all()


def test_figure4_draws_the_baselines_with_their_own_markers_and_labels(tmp_path, monkeypatch):
    import pandas as pd

    from nac.report import figures
    from nac.report.published import RUN_LABELS

    drawn = []
    monkeypatch.setattr(figures, "save", lambda fig, out_dir, name: drawn.append(fig) or [])
    rows = {
        "digits": pd.DataFrame(_rows(["perceiver_io", "nac", "neural_interpreter", "modular_network"])),
        "shapes_novel": pd.DataFrame(_rows(["perceiver_io", "nac"])),
    }
    figures.figure4(rows, [1, 2, 4], 8, {"nac": "NAC (scale-free)"}, tmp_path)
    with_baselines, without = drawn[0].axes[0], drawn[0].axes[1]
    lines = {ln.get_label(): ln for ln in with_baselines.get_lines()}
    assert set(lines) == {
        "Perceiver IO",
        "NAC (scale-free)",
        RUN_LABELS["neural_interpreter"],
        RUN_LABELS["modular_network"],
        "chance (8-way)",
    }
    styles = [
        (lines[k].get_marker(), lines[k].get_linestyle())
        for k in ("Perceiver IO", RUN_LABELS["neural_interpreter"], RUN_LABELS["modular_network"])
    ]
    assert len(set(styles)) == 3
    assert {ln.get_label() for ln in without.get_lines()} == {"Perceiver IO", "NAC (scale-free)", "chance (8-way)"}
