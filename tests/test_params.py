"""params.yaml is the default composition of conf/; bad configs are rejected before any work."""

import copy
from pathlib import Path

import pytest
import yaml

from nac.compose import validate_all as validate
from nac.pipeline.params import PROFILES, ParamsError, compose

ROOT = Path(__file__).resolve().parents[1]


def test_committed_params_yaml_is_the_default_composition():
    committed = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert committed == compose([]), "params.yaml is stale: run `python -m nac.compose` and commit it"


@pytest.mark.parametrize(
    "overrides",
    [[], ["profile=smoke"], ["profile=paper"], ["prior=ring_of_cliques"], ["profile=smoke", "prior=erdos_renyi"]],
)
def test_every_group_choice_composes_and_validates(overrides):
    params = compose(overrides)
    validate(params)
    if overrides and overrides[-1].startswith("prior="):
        assert params["prior"]["name"] == overrides[-1].split("=")[1]


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], node


def test_every_profile_file_is_a_choice_and_fills_the_base():
    """conf/base.yaml writes every key once and marks the per-profile nodes `???`; each file in
    conf/profile/ must be a valid profile and set every one of them."""
    files = sorted(p.stem for p in (ROOT / "conf" / "profile").glob("*.yaml"))
    assert files == sorted(PROFILES)
    for profile in files:
        params = compose([f"profile={profile}"])
        assert params["profile"] == profile
        unset = [key for key, value in _leaves(params) if value == "???"]
        assert not unset, f"conf/profile/{profile}.yaml leaves {unset} of conf/base.yaml unset"


@pytest.mark.parametrize("override,choices", [("prior=small_world", "scale_free"), ("profile=huge", "mini")])
def test_invalid_group_choice_names_the_valid_choices(override, choices):
    with pytest.raises(Exception, match=choices):
        compose([override])


def _broken(path: str, value):
    params = copy.deepcopy(compose(["profile=smoke"]))
    node = params
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return params


@pytest.mark.parametrize(
    "path,value,match",
    [
        ("image.model.heads", 3, "not divisible"),
        ("image.model.n_processor", 0, r"image\.model\.n_processor=0: Input should be greater than or equal to 1"),
        ("image.train.batch_size", 0, "batch_size"),
        ("image.train.warmup_epochs", 99, "warmup_epochs"),
        ("image.ladder", ["nac-small_world"], "valid: perceiver_io"),
        ("seeds", [], "seeds"),
        ("prune.dropped_fraction", [0.0, 1.0], r"prune\.dropped_fraction\[1\]=1\.0: Input should be less than 1"),
        ("data.objects.n_trian", 5, r"data\.objects\.n_trian=5: Extra inputs are not permitted; remove it"),
        ("image.ood_dataset", "cifar10", "not in data.datasets"),
        ("data.downloads", ["objects"], "embedded dataset 'objects'"),
        (
            "data.downloads",
            ["cifar10"],
            r"data: Value error, downloads lists 'cifar10', which is not in datasets .*; add it there",
        ),
        ("data.downloads", "cifar10", "data.downloads"),
        ("data.datasets", ["objects", "objects_r", "cifar10"], r"\['cifar10'\], downloaded datasets missing"),
    ],
)
def test_impossible_values_are_rejected_naming_the_key(path, value, match):
    with pytest.raises((ParamsError, ValueError), match=match):
        validate(_broken(path, value))


def test_conf_prior_group_is_the_code_s_priors():
    """Priors and their parameters are defined once, in ``nac.graphs`` (``PRIORS``,
    ``PRIOR_DEFAULTS``); ``conf/prior/<name>.yaml`` must be exactly that (one file per prior,
    named as the prior, with its default parameters), so the composed ``prior`` section and the
    Table 1 ladder's ``nac-<prior>`` rungs use the same values."""
    from nac.graphs import PRIOR_DEFAULTS, PRIORS

    files = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "conf" / "prior").glob("*.yaml")}
    assert sorted(files) == sorted(PRIORS)
    for name, group in files.items():
        assert group == {"name": name, "params": PRIOR_DEFAULTS[name]}, (
            f"conf/prior/{name}.yaml differs from PRIOR_DEFAULTS"
        )


def test_composer_help_lists_groups_and_print_writes_nothing(tmp_path, capsys, monkeypatch):
    """`python -m nac.compose --help` lists every group with its options and default (it was a Hydra
    lexer error); `--print` shows the composition and leaves params.yaml alone."""
    from nac import compose as C

    C.main(["--help"])
    out = capsys.readouterr().out
    for group, options in C.groups().items():
        assert group in out and all(o in out for o in options)
    assert "(default: mini)" in out and "(default: scale_free)" in out
    monkeypatch.chdir(tmp_path)
    C.main(["--print", "profile=smoke"])
    assert capsys.readouterr().out.startswith("profile: smoke") and not (tmp_path / "params.yaml").exists()
    with pytest.raises(SystemExit):
        C.main(["--bogus"])


def test_model_group_sets_one_size_in_every_track_and_the_profile_picks_it():
    """conf/model/<scale>.yaml writes the NAC size once for every track; each profile picks its own
    scale, and `model=...` on the command line wins over the profile's choice."""
    size = ("d_model", "d_sig", "n_processor", "n_readout", "depth", "heads", "ffn_mult")
    tracks = ("image", "points", "listops", "text", "nlvr")
    sizes = {}
    for profile in sorted(PROFILES):
        params = compose([f"profile={profile}"])
        got = {t: {k: params[t]["model"][k] for k in size} for t in tracks}
        assert all(got[t] == got["image"] for t in tracks), f"profile {profile}: track sizes differ: {got}"
        assert all("tokenizer" in params[t]["model"] for t in tracks)
        sizes[profile] = got["image"]
    # one size per model scale; converged trains mini's models longer, converged_smoke smoke's
    assert len({tuple(s.values()) for s in sizes.values()}) == len(list((ROOT / "conf" / "model").glob("*.yaml")))
    assert sizes["converged"] == sizes["mini"] and sizes["converged_smoke"] == sizes["smoke"]
    crossed = compose(["profile=mini", "model=smoke"])
    assert crossed["profile"] == "mini" and crossed["points"]["model"]["d_model"] == sizes["smoke"]["d_model"]
    assert crossed["data"] == compose([])["data"]


def test_an_experiment_is_its_overrides_and_nothing_else():
    """conf/experiment/<name>.yaml is a named set of overrides over the chosen profile (none by
    default): long_image changes image.train.epochs and no other value."""
    base, long = compose(["profile=smoke"]), compose(["profile=smoke", "experiment=long_image"])
    assert long["image"]["train"]["epochs"] == 96 != base["image"]["train"]["epochs"]
    long["image"]["train"]["epochs"] = base["image"]["train"]["epochs"]
    assert long == base
