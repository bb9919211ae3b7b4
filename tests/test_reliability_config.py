"""Issue 23, defects 3, 5, 7 and 8: every override is validated in full before DVC removes any
output (the ``validate`` stage), ``data.root`` outside the repository is refused before any
download, lists of runs are unique and pruning takes only models with processor modules, and the
Python API names the field, type or input layout it refuses."""

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from nac.compose import validate_all
from nac.config import ModelConfig
from nac.pipeline.params import ParamsError

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = yaml.safe_load((ROOT / "params.yaml").read_text())
STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _params(**changes):
    params = copy.deepcopy(COMMITTED)
    for key, value in changes.items():
        node = params
        *path, last = key.split(".")
        for k in path:
            node = node[k]
        node[last] = value
    return params


# ---- defect 3: a bad override fails before DVC removes any stage's outputs ----------------------
def test_every_stage_depends_on_the_validate_stage():
    """DVC runs ``validate`` (params.yaml in full) before every other stage; its output is a fixed
    line, so a param change still reruns only the stages that read that param."""
    assert STAGES["validate"]["outs"] == [{"params.validated": {"cache": False}}]
    assert STAGES["validate"]["params"] == [{"params.yaml": None}]  # every key of params.yaml
    for name, stage in STAGES.items():
        if name != "validate":
            assert "params.validated" in (stage.get("do") or stage)["deps"], name


def _env(repo: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo), DVC_NO_ANALYTICS="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.mark.slow  # each a dvc exp run (5 s); in CI's slow run since the default run went past 5 min (2026-11-27)
@pytest.mark.parametrize("override", ["+image.train.epocs=2", "seeds=0"])
def test_bad_override_fails_in_validate_and_removes_no_output(tmp_path, override):
    """``dvc exp run -S profile=smoke -S <bad>`` (DVC composes params.yaml itself with Hydra, past
    the composer): the ``validate`` stage fails naming the key, and no other stage ran, so the
    previous results (here a planted ``metrics/image/train`` file) are untouched."""
    from nac.compose import write_params

    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ["nac", "stages", "conf", "notebooks", "bench", "dvc.yaml", ".dvcignore", "pyproject.toml"]:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(src, repo / name)
    write_params(repo / "params.yaml", ["profile=smoke"])
    kept = repo / "metrics/image/train/nac-scale_free-0.json"
    kept.parent.mkdir(parents=True)
    kept.write_text('{"run": "nac-scale_free", "seed": 0}')
    for cmd in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "copy"],
    ):
        subprocess.run(cmd, cwd=repo, env=_env(repo), check=True, capture_output=True, timeout=120)
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "run", "-S", "profile=smoke", "-S", override],
        cwd=repo,
        env=_env(repo),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    key = override.lstrip("+").split("=")[0]
    assert f"error: {key}" in out and "failed to reproduce 'validate'" in out, out[-3000:]
    assert "Running stage 'validate'" in out and out.count("Running stage") == 1, out[-3000:]
    assert kept.read_text() == '{"run": "nac-scale_free", "seed": 0}'
    assert not [p for p in (repo / "data").rglob("*") if p.is_file()]  # no download ran


# ---- defect 5: data.root outside the repository ---------------------------------------------
@pytest.mark.parametrize("root", ["/mnt/disk/nac-data", "../nac-data", "~/nac-data", "data/../../x"])
def test_data_root_outside_the_repository_is_refused_with_the_fix(root):
    with pytest.raises(ParamsError) as err:
        validate_all(_params(**{"data.root": root}))
    msg = str(err.value)
    assert f"data.root={root!r} must be a relative folder inside the repository" in msg
    assert "mount --bind" in msg and "dvc cache dir" in msg


def test_data_root_inside_the_repository_is_accepted():
    validate_all(_params(**{"data.root": "data"}))
    validate_all(_params(**{"data.root": "store/nac-data"}))


# ---- defect 7: unique runs, and prune takes only models with processor modules -----------------
@pytest.mark.parametrize(
    "key,runs",
    [
        ("image.ladder", [*COMMITTED["image"]["ladder"], "perceiver_io"]),
        ("prune.runs", [*COMMITTED["prune"]["runs"], "modfc"]),
        ("points.runs", ["perceiver_io", "nac", "perceiver_io"]),
        ("nlvr.runs", ["conditional", "conditional", "text_only", "image_only"]),
        ("fewshot.runs", [*COMMITTED["fewshot"]["runs"], COMMITTED["fewshot"]["runs"][0]]),
    ],
)
def test_a_repeated_run_is_refused_naming_the_entry(key, runs):
    with pytest.raises(
        ParamsError,
        match=rf"{key}: Value error, \[\d+\]='{runs[-1] if key != 'nlvr.runs' else 'conditional'}' "
        rf"repeats an earlier entry; list each once",
    ):
        validate_all(_params(**{key: runs}))


@pytest.mark.parametrize("baseline", ["neural_interpreter", "modular_network"])
def test_pruning_a_baseline_is_refused_naming_the_entry(baseline):
    assert baseline in COMMITTED["image"]["ladder"]
    with pytest.raises(ParamsError, match=rf"prune\.runs\[1\]='{baseline}' cannot be pruned: .*processor modules"):
        validate_all(_params(**{"prune.runs": ["modfc", baseline]}))


# ---- defect 8: the Python API ---------------------------------------------------------------
@pytest.mark.parametrize(
    "kw,message",
    [
        ({"d_model": "64"}, r"model\.d_model='64': Input should be a valid integer; remove the quotes \(write 64\)"),
        ({"tau": "hot"}, r"model\.tau='hot': Input should be a valid number"),
        ({"n_processor": 8.0}, r"model\.n_processor=8\.0: Input should be a valid integer; write 8"),
        ({"gated_ffn": 1}, r"model\.gated_ffn=1: Input should be a valid boolean; write true or false"),
        ({"tokenizer": None}, r"model\.tokenizer=None: Input should be a valid dictionary"),
    ],
)
def test_model_config_checks_types_before_arithmetic(kw, message):
    with pytest.raises(TypeError, match=message):
        ModelConfig(**kw)
    assert ModelConfig(tau=1, d_model=64).tau == 1  # an int is a float


def test_baseline_and_train_configs_check_types():
    from nac.baselines.modular_networks import ModularNetworkConfig
    from nac.baselines.neural_interpreter import NeuralInterpreterConfig
    from nac.training.config import TrainConfig

    with pytest.raises(
        TypeError, match=r"neural_interpreter\.d_model='64': Input should be a valid integer; remove the quotes"
    ):
        NeuralInterpreterConfig(d_model="64")
    with pytest.raises(
        TypeError, match=r"model\.conv_layers\[0\]='8': Input should be a valid integer; remove the quotes"
    ):
        ModularNetworkConfig(conv_layers=["8"])
    with pytest.raises(
        ValueError, match=r"train\.epochs='3': Input should be a valid integer; remove the quotes"
    ):  # also a ValueError
        TrainConfig(epochs="3")


CONV = {"kind": "conv32", "dim": 16, "pos_dim": 4, "width": 8}


@pytest.mark.parametrize(
    "shape,dtype,message",
    [
        (
            (2, 32, 32, 3),
            torch.uint8,
            r"\[B, 3, H, W\], channels first, got shape \[2, 32, 32, 3\], which looks "
            r"channels-last; permute it: x\.permute\(0, 3, 1, 2\)",
        ),
        (
            (2, 1, 32, 32),
            torch.float32,
            r"got shape \[2, 1, 32, 32\]: one channel \(grayscale\); repeat it to 3 channels",
        ),
        (
            (3, 32, 32),
            torch.uint8,
            r"got a 3-D tensor of shape \[3, 32, 32\] \(a single example\? add the batch dimension",
        ),
        ((2, 3, 32, 32), torch.int64, r"got dtype torch\.int64"),
    ],
)
def test_model_refuses_image_layouts_saying_what_it_expected(shape, dtype, message):
    from nac.registry import build_model

    model = build_model(
        ModelConfig(
            variant="perceiver_io",
            tokenizer=CONV,
            d_model=16,
            d_sig=8,
            n_processor=4,
            heads=2,
            readin_heads=1,
            readout_heads=1,
            generator_heads=2,
            depth=1,
        )
    )
    with pytest.raises(
        (TypeError, ValueError), match=rf"image tokenizer expected uint8 \(0-255\) or float .*{message}"
    ):
        model(torch.zeros(shape, dtype=dtype))
    assert model(torch.zeros(2, 3, 32, 32, dtype=torch.uint8)).shape[0] == 2


def test_sequence_point_and_feature_tokenizers_check_their_input():
    from nac.circuits.tokenizers import build_tokenizer

    with pytest.raises(
        TypeError, match=r"sequence tokenizer expected integer token ids \[B, T\], got dtype torch\.float32"
    ):
        build_tokenizer({"kind": "sequence", "vocab_size": 10, "dim": 8})(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"point tokenizer expected float points \[B, N, 3\].*transpose"):
        build_tokenizer({"kind": "points", "dim": 8})(torch.zeros(2, 3, 100))
    with pytest.raises(ValueError, match=r"feature tokenizer expected float features \[B, N, 6\]"):
        build_tokenizer({"kind": "features", "d_feat": 6, "dim": 8})(torch.zeros(2, 4, 5))
