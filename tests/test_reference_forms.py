"""The reference forms of nac/testing/reference_forms.py take effect where the equality tests rely on them
(else a fast-vs-plain comparison would compare the fast path with itself), on deep copies too, and
are taken off again after a ``with`` block."""

import copy

import torch
from tiny_models import make_tiny_config

from nac import build_model
from nac.baselines.neural_interpreter import NeuralInterpreter, NeuralInterpreterConfig
from nac.circuits.modfc import ModFC
from nac.testing.reference_forms import direct_readin, per_layer_modulation, plain_ni


def _calls(module: torch.nn.Module, run) -> int:
    """How often ``module``'s forward runs during ``run()``."""
    n = [0]
    handle = module.register_forward_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    try:
        run()
    finally:
        handle.remove()
    return n[0]


def _images(n=2):
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def test_direct_readin_runs_per_module_keys_and_is_taken_off_again():
    model = build_model(make_tiny_config(signature_fit_steps=20)).eval()
    x = _images()
    # the folded read-in never calls its key ModFC; the direct form does, once per forward
    assert _calls(model.read_in.k, lambda: model(x)) == 0
    with direct_readin(model):
        assert _calls(model.read_in.k, lambda: model(x)) == 1
        twin = copy.deepcopy(model)
    assert _calls(model.read_in.k, lambda: model(x)) == 0
    assert _calls(twin.read_in.k, lambda: twin(x)) == 1  # a copy made inside keeps the form, bound to itself
    assert twin.read_in.attend.__self__ is twin.read_in


def test_per_layer_modulation_has_every_modfc_compute_its_own():
    model = build_model(make_tiny_config(signature_fit_steps=20)).eval()
    x = _images()
    calls = []
    orig = ModFC.modulation

    def spy(self, code):
        calls.append(self)
        return orig(self, code)

    ModFC.modulation = spy
    try:
        model(x)
        assert calls == []  # batched: no ModFC computes its own
        with per_layer_modulation(model):
            model(x)
        assert calls
        calls.clear()
        model(x)
        assert calls == []
    finally:
        ModFC.modulation = orig


def test_plain_ni_forms_the_printed_attention():
    cfg = NeuralInterpreterConfig(
        num_classes=3, tokenizer={"kind": "conv32", "dim": 16, "pos_dim": 8}, d_model=16, d_type=8, d_code=12
    )
    model = NeuralInterpreter(cfg).eval()
    x = _images()
    query = next(m for m in model.modules() if type(m).__name__ == "ModAttn").query
    # the fast ModAttn projects q, k, v in one product (query's forward never runs); eq. 6 as printed does
    assert _calls(query, lambda: model(x)) == 0
    with plain_ni(model):
        assert _calls(query, lambda: model(x)) > 0
    assert _calls(query, lambda: model(x)) == 0
