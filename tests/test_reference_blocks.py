"""Issue 49: the configuration rule (docs/reference.md, "Configurations"), block by block, in every profile.

The authors' two recorded templates are data (``nac/reference/templates/``, each value with its source in their
repository). For each block (read-in, propagators, kernel, read-out, initial state, ...) and each of ``mini``,
``converged``, ``paper`` and the ImageNet pre-training, every recorded field of the template the rule names
(BARAL-X for the model, TINY-INET-NC-X for the image track's data side) is compared with the composed
configuration; a difference passes only when the departures table in docs/reference.md lists it, with the same
template value and our value, and a row of the table that is no longer a difference fails too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from nac.config import ModelConfig
from nac.reference import fields
from nac.reference.compare import WHERE, departures, show
from nac.registry import build_model
from nac.training.optim import decays

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference.md"
BLOCKS = sorted({key.split(".")[0] for key in fields("inet_baral_x")})
TEMPLATE_NAMES = {
    "BARAL-X": {"inet_baral_x"},
    "TINY": {"tiny_inet_nc_x"},
    "TINY / BARAL-X": {"inet_baral_x", "tiny_inet_nc_x"},
}


def _cell(text: str) -> str:
    return text.strip().strip("`")


def departures_table() -> dict[tuple[str, str], tuple[set[str], str, str]]:
    """``{(profile, field): (templates, template's value, ours)}`` from the table under "Departures from the
    rule's templates" in docs/reference.md."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("### Departures from the rule's templates")
    rows = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = line.split("|")[1:-1]
        if len(cells) != 6 or cells[0].strip() in ("profiles", "---"):
            continue
        profiles, field, tmpl, ref, ours, reason = (c.strip() for c in cells)
        assert reason, f"docs/reference.md: the departure of {field} gives no reason"
        for profile in re.split(r",\s*", profiles):
            assert profile in WHERE, f"docs/reference.md: unknown profile {profile!r} in the departures table"
            key = (profile, _cell(field))
            assert key not in rows, f"docs/reference.md: {key} listed twice"
            rows[key] = (TEMPLATE_NAMES[tmpl], _cell(ref), _cell(ours))
    assert rows, "no departures table found in docs/reference.md"
    return rows


@pytest.fixture(scope="module")
def table():
    return departures_table()


@pytest.fixture(scope="module")
def found():
    return {name: departures(name) for name in WHERE}


@pytest.mark.parametrize("profile", list(WHERE))
@pytest.mark.parametrize("block", BLOCKS)
def test_each_block_follows_the_rule_but_for_the_listed_departures(block, profile, table, found):
    here = {k: v for k, v in found[profile].items() if k.split(".")[0] == block}
    listed = {f: row for (p, f), row in table.items() if p == profile and f.split(".")[0] == block}
    unlisted = sorted(set(here) - set(listed))
    assert not unlisted, f"{profile}: departures not in docs/reference.md's table: " + "; ".join(
        f"{k}: template {show(here[k][1])}, ours {show(here[k][2])}" for k in unlisted
    )
    stale = sorted(set(listed) - set(here))
    assert not stale, f"{profile}: rows of the departures table that are no longer departures: {stale}"
    for key, (template, ref, ours) in here.items():
        names, ref_cell, ours_cell = listed[key]
        assert template in names, f"{profile} {key}: the rule names {template}, the table {names}"
        assert (ref_cell, ours_cell) == (show(ref), show(ours)), f"{profile} {key}: the table's values are stale"


def test_the_table_names_only_recorded_fields(table):
    recorded = set(fields("inet_baral_x"))
    assert {f for _, f in table} <= recorded


def test_the_rule_covers_the_issue_blocks():
    """Read-in, propagators, read-out, initial state, the optimizer's groups and clipping, the kernel: each a
    block of the recorded templates the test above walks."""
    assert {"read_in", "propagators", "read_out", "initial_state", "optimizer", "grad_clip", "kernel"} <= set(BLOCKS)


def _authors_name(name: str) -> str:
    """Our parameter name as the authors' filter would see it: their signatures end in ``signatures_``, their
    positional grid in ``grid`` (ours: ``pos``)."""
    if name.endswith("signatures"):
        return name + "_"
    if name.rsplit(".", 1)[-1] == "pos":
        return name[: -len("pos")] + "grid"
    return name


@pytest.mark.parametrize("ours,template", [("baral_x", "inet_baral_x"), ("tiny", "tiny_inet_nc_x")])
def test_the_decay_filters_are_the_recorded_formulas(ours, template):
    """The optimizer's parameter groups: our filter decays exactly the parameters the recorded formula (the
    template's ``no_weight_decay_filter``, evaluated as written) does not exempt, on every parameter of a NAC
    with input latents and a learnable per-module bandwidth (0-d parameters, codes, signatures, the grid)."""
    formula = fields(template)["optimizer.no_weight_decay_filter"]["value"]
    exempt = eval(f"lambda name, param: {formula}")  # the recorded expression, nothing else
    model = build_model(
        ModelConfig(
            d_model=16,
            d_sig=8,
            n_processor=6,
            n_readout=2,
            depth=1,
            heads=2,
            input_latents=3,
            learn_bandwidth=True,
            kernel_per_module=True,
            signature_fit_steps=5,
            tokenizer={"kind": "conv32", "dim": 8, "pos_dim": 4},
        )
    )
    names = dict(model.named_parameters())
    assert any(p.dim() == 0 for p in names.values()) and "tokenizer.pos" in names
    assert any(n.endswith("codes") for n in names) and any(n.endswith("signatures") for n in names)
    for name, p in names.items():
        assert decays(name, p, ours) == (not exempt(_authors_name(name), p)), name
    # the two filters differ exactly on the 0-d parameters
    differ = {n for n, p in names.items() if decays(n, p, "baral_x") != decays(n, p, "tiny")}
    assert differ == {n for n, p in names.items() if p.dim() == 0}


def test_the_pretraining_tokenizer_is_femto():
    """BARAL-X's femto ConvNeXt (depths [1, 0]: the second stage only downsamples) builds and gives its
    28 x 28 grid of 192 + 64 channels."""
    from nac.circuits.tokenizers import convnext

    tok = convnext(depths=[1, 0], dims=[96, 192], pos_dim=64, image_size=224)
    assert tok(torch.zeros(1, 3, 224, 224)).shape == (1, 28 * 28, 256)
