"""Every stage rejects a bad params.yaml before any work, naming the key and the fix; the composer
never leaves an invalid params.yaml behind (issue "Reliability: no silent wrong numbers")."""

import copy
import os
import time
from pathlib import Path

import pytest
import yaml

from nac.compose import load_all_params, main, validate_all, write_params
from nac.pipeline.params import ParamsError, load_params, read_params
from nac.tracks import common, fewshot_params, image

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = yaml.safe_load((ROOT / "params.yaml").read_text())


def _params(**changes):
    """The committed params.yaml with ``changes`` (dotted key -> value; ``...`` deletes the key)."""
    params = copy.deepcopy(COMMITTED)
    for key, value in changes.items():
        node = params
        *path, last = key.split(".")
        for k in path:
            node = node[k]
        if value is ...:
            del node[last]
        else:
            node[last] = value
    return params


def _text(**changes) -> str:
    return yaml.safe_dump(_params(**changes), sort_keys=False)


def _with_line(lineno: int, line: str) -> str:
    """The committed params.yaml with ``line`` inserted so that it is line ``lineno`` (1-based)."""
    lines = (ROOT / "params.yaml").read_text().splitlines()
    lines.insert(lineno - 1, line)
    return "\n".join(lines) + "\n"


# (id, params.yaml text, or overrides for the composer, and the message the user sees)
DEFECTS = [
    (
        "quoted-float",
        _text(**{"image.train.lr": "LR"}).replace("lr: LR", "lr: '1e-3'"),
        r"image\.train\.lr='1e-3': Input should be a valid number; remove the quotes \(write 1e-3\)",
    ),
    (
        "quoted-int",
        _text(**{"image.train.epochs": "5"}),
        r"image\.train\.epochs='5': Input should be a valid integer; remove the quotes \(write 5\)",
    ),
    ("empty-file", "", r"params\.yaml is empty; recreate it with `python -m nac\.compose`"),
    ("comments-only", "# nothing here\n", r"params\.yaml is empty"),
    ("not-a-mapping", "- profile\n- mini\n", r"params\.yaml must be a mapping of sections .*got a list"),
    (
        "n_train-0",
        _text(**{"data.objects.n_train": 0}),
        r"data\.objects\.n_train=0: Input should be greater than or equal to 1",
    ),
    (
        "n_train-negative",
        _text(**{"data.objects.n_train": -5}),
        r"data\.objects\.n_train=-5: Input should be greater than or equal to 1",
    ),
    (
        "batch_size-fraction",
        _text(**{"image.train.batch_size": 1.5}),
        r"image\.train\.batch_size=1\.5: Input should be a valid integer; use a whole number",
    ),
    (
        "num_workers-negative",
        _text(**{"image.train.num_workers": -1}),
        r"image\.train\.num_workers=-1: Input should be greater than or equal to 0",
    ),
    (
        "unknown-top-level-key",
        _text(epochs=3),
        r"^epochs=3: Extra inputs are not permitted; remove it \(or correct its spelling",
    ),
    (
        "unknown-nested-key",
        _text(**{"image.train.lrr": 0.1}),
        r"image\.train\.lrr=0\.1: Unexpected keyword argument; remove it \(or correct its spelling: did you mean lr\?",
    ),
    (
        "unknown-nested-key-unlike-any",
        _text(**{"image.train.qqqq": 0.1}),
        r"image\.train\.qqqq=0\.1: .*correct its spelling; valid keys here: adamw, amp, augment, batch_size, compile,",
    ),
    (
        "unknown-track-key",
        _text(**{"points.model.tokenizer.dimm": 8}),
        r"points\.model\.tokenizer\.dimm=8: Extra inputs are not permitted; remove it \(or correct its spelling",
    ),
    (
        "unknown-protocol-key",
        _text(**{"fewshot.protocol.way": 5}),
        r"fewshot\.protocol\.way=5: Unexpected keyword argument; remove it",
    ),
    ("yaml-syntax-error", _with_line(7, "\tbroken: 1"), r"params\.yaml:7:1: YAML syntax error: .*'\\t'"),
    (
        "yaml-unclosed-bracket",
        _with_line(3, "seeds_bad: [0, 1"),
        r"params\.yaml:\d+:\d+: YAML syntax error: .*at line 3\)",
    ),
    (
        "composer-validates-before-writing",
        ["image.train.num_workers=-1"],
        r"image\.train\.num_workers=-1: Input should be greater than or equal to 0",
    ),
    ("composer-validates-tracks", ["points.train.lr=-1"], r"points\.train"),
]


@pytest.mark.parametrize("case,content,message", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_defect_is_rejected_naming_the_key_and_the_fix(tmp_path, case, content, message):
    path = tmp_path / "params.yaml"
    if isinstance(content, list):  # the composer: validate everything, then replace params.yaml
        old = (ROOT / "params.yaml").read_text()
        path.write_text(old)
        with pytest.raises(ParamsError, match=message):
            write_params(path, content)
        assert path.read_text() == old, "the composer replaced params.yaml with an invalid composition"
        assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"], "a temporary file was left behind"
        return
    path.write_text(content)
    with pytest.raises(ParamsError, match=message):
        load_all_params(path)
    with pytest.raises(ParamsError, match=message):  # the loader of the stages that read the section too
        load_params(path, check=STAGE_CHECK.get(case, ()))


# The validators a stage reading the defective section passes to load_params (none: every stage's).
STAGE_CHECK = {
    "quoted-float": [image.validate],
    "quoted-int": [image.validate],
    "batch_size-fraction": [image.validate],
    "num_workers-negative": [image.validate],
    "unknown-nested-key": [image.validate],
    "unknown-nested-key-unlike-any": [image.validate],
    "unknown-track-key": [common.validator("points")],
    "unknown-protocol-key": [fewshot_params.validate],
}


@pytest.mark.parametrize(
    "key,value,reads,other",
    [
        ("points.train.lr", -1.0, [common.validator("points")], [image.validate, common.validator("text")]),
        ("image.train.epochs", 0, [image.validate], [common.validator("nlvr"), fewshot_params.validate]),
        ("prune.dropped_fraction", [0.0, 0.3], [image.validate_prune], [image.validate]),
        ("fewshot.protocol.ways", 11, [fewshot_params.validate], [image.validate, image.validate_prune]),
    ],
)
def test_a_stage_validates_only_the_sections_it_reads(tmp_path, key, value, reads, other):
    """A defect in one section fails the stages that read it and no other (the composer and
    ``load_all_params`` reject it too)."""
    path = tmp_path / "params.yaml"
    path.write_text(_text(**{key: value}))
    load_params(path)
    for check in other:
        load_params(path, check=[check])
    for check in reads:
        with pytest.raises(ParamsError, match=key.split(".")[0]):
            load_params(path, check=[check])
    with pytest.raises(ParamsError):
        load_all_params(path)


def test_committed_params_load_and_name_the_profile(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("NAC_QUIET", raising=False)
    path = tmp_path / "params.yaml"
    path.write_text((ROOT / "params.yaml").read_text())
    assert load_all_params(path) == COMMITTED
    err = capsys.readouterr().err
    assert f"params.yaml: profile={COMMITTED['profile']} prior={COMMITTED['prior']['name']}" in err
    monkeypatch.setenv("NAC_QUIET", "1")
    load_params(path)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "section,cls",
    [
        ("image.model", "ModelConfig"),
        ("points.model", "ModelConfig"),
        ("image.train", "TrainConfig"),
        ("nlvr.train", "TrainConfig"),
    ],
)
def test_every_numeric_dataclass_field_is_type_checked(section, cls):
    """Types come from the dataclass annotations: a field added to ModelConfig / TrainConfig later
    is covered without a change to the validation."""
    import dataclasses

    from nac.config import ModelConfig
    from nac.pipeline.schema_models import IMAGE_MODEL_SET, TRACK_MODEL_SET, TRAIN_SET
    from nac.training.config import TrainConfig

    klass = {"ModelConfig": ModelConfig, "TrainConfig": TrainConfig}[cls]
    set_by = TRAIN_SET if cls == "TrainConfig" else IMAGE_MODEL_SET if section == "image.model" else TRACK_MODEL_SET
    kinds = klass.__pydantic_fields__
    numbers = [
        f.name
        for f in dataclasses.fields(klass)
        if any(t in repr(kinds[f.name].annotation) for t in ("int", "float"))
        and "_Conv32" not in repr(kinds[f.name].annotation)  # a tokenizer: a mapping
        and f.name not in set_by
    ]
    assert numbers
    for name in numbers:
        with pytest.raises(
            ParamsError,
            match=rf"{section}\.{name}='1e-3': Input should be a valid (number|integer); remove the quotes",
        ):
            p = _params(**{f"{section}.{name}": "1e-3"})
            validate_all(p)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("fewshot.protocol.ways", 11, r"fewshot\.protocol\.ways=11 exceeds the 10 classes of target 'digits'"),
        ("prune.dropped_fraction", [0.0, 0.3], r"not a whole number of modules .*multiples of 1/32"),
        (
            "data.objects.n_val",
            0,
            r"image\.val_split='val' reads the val split of 'objects', but data\.objects\.n_val=0",
        ),
        ("data.objects.jitter", 1.5, r"data\.objects\.jitter=1\.5: Input should be less than or equal to 1"),
        ("data.objects.clutter", -1, r"data\.objects\.clutter=-1: Input should be greater than or equal to 0"),
        (
            "data.digits.test_fraction",
            0.95,
            r"data\.digits: Value error, the split fractions .* sum to 1\.05; they must leave a training split",
        ),
        ("data.listops.min_length", 500, r"data\.listops: Value error, min_length=500 exceeds max_length=100"),
        (
            "image.model.tokenizer.image_size",
            30,
            r"image\.model\.tokenizer\.image_size=30: Input should be a multiple of 4; use such a multiple",
        ),
        ("image.train.seed", 3, r"image\.train: Value error, seed is set by `seeds`, not by params\.yaml; remove it"),
        (
            "prior.params.c",
            "1e1",
            r"prior\.params\.c='1e1': Input should be a valid number; remove the quotes \(write 1e1\)",
        ),
        ("prior.params.k", 3, r"prior\.params\.k=3: Extra inputs are not permitted; remove it"),
        ("device", "gpu", r"device='gpu': Input should be 'auto', 'cpu' or 'cuda'"),
        ("nlvr.analysis.folds", 1, r"nlvr\.analysis\.folds=1: Input should be greater than or equal to 2"),
        ("text.ngram.n", "3", r"text\.ngram\.n='3': Input should be a valid integer; remove the quotes \(write 3\)"),
        (
            "image.train.augment",
            "yes",
            r"image\.train\.augment='yes': Input should be True, False or 'authors_tinyimagenet'",
        ),
        (
            "image.train.epochs",
            "1e1",
            r"image\.train\.epochs='1e1': Input should be a valid integer; remove the quotes \(write 10\)$",
        ),
        ("points.train.batch_size", 5000, r"points\.train\.batch_size=5000 exceeds data\.pointclouds\.n_train=2400"),
        ("costs.pairs", ["tiny", "cifar"], r"costs\.pairs\[1\]='cifar': Input should be 'tiny' or 'imagenet'"),
        ("costs.pairs", [], r"costs\.pairs=\[\]: List should have at least 1 item"),
        (
            "costs.pairs",
            ["tiny", "tiny"],
            r"costs\.pairs: Value error, \[1\]='tiny' repeats an earlier entry; list each once",
        ),
    ],
)
def test_ranges_and_cross_field_rules(key, value, message):
    with pytest.raises(ParamsError, match=message):
        p = _params(**{key: value})
        validate_all(p)


def test_params_yaml_reads_numbers_as_dvc_and_hydra_do(tmp_path):
    """params.yaml is read as OmegaConf (and DVC's ``-S``, and Hydra) read it, YAML 1.2's numbers:
    ``1e-3`` as a user types it (or ``dvc exp run -S image.train.lr=1e-3`` writes it) is the float
    0.001, not a string (PyYAML's YAML 1.1 reads it as text); a repeated key is refused, naming
    its line (PyYAML kept the last one silently)."""
    path = tmp_path / "params.yaml"
    path.write_text(_text(**{"image.train.lr": "LR"}).replace("lr: LR", "lr: 1e-3"), encoding="utf-8")
    params = load_params(path)
    assert params["image"]["train"]["lr"] == 0.001
    validate_all(params)
    assert load_params(ROOT / "params.yaml") == COMMITTED  # the committed file reads as before
    text = (ROOT / "params.yaml").read_text(encoding="utf-8")
    path.write_text(text + "profile: mini\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"params\.yaml:\d+:1: YAML syntax error: found duplicate key profile"):
        load_params(path)
    # nothing is interpolated (DVC tracks the text): a ``${...}`` is the string it is, and a bad one is named
    path.write_text("a: '${oc.env:HOME}'\nb: '${x}'\n", encoding="utf-8")
    assert read_params(path) == {"a": "${oc.env:HOME}", "b": "${x}"}
    path.write_text("a: ${\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=r"params\.yaml: .*'\$\{'; fix that value"):
        read_params(path)


def test_the_composer_replaces_params_yaml_only_when_valid(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: old\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["image.train.batch_size=0"])
    assert exit_info.value.code != 0
    assert (tmp_path / "params.yaml").read_text() == "profile: old\n"
    assert "image.train" in capsys.readouterr().err
    main(["profile=smoke"])
    assert yaml.safe_load((tmp_path / "params.yaml").read_text())["profile"] == "smoke"
    assert sorted(os.listdir(tmp_path)) == ["params.yaml"]


def test_validation_is_fast():
    validate_all(COMMITTED)  # imports
    t = time.perf_counter()
    validate_all(COMMITTED)
    assert time.perf_counter() - t < 1.0
