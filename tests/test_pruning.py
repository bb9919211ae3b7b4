import pytest
import torch

from nac import build_model
from nac.pruning import drop_modules, expected_degree, module_connectivity
from nac.registry import count_parameters


@pytest.mark.parametrize("variant", ["nac", "frozen_graph", "modfc", "perceiver_io"])
def test_dropping_k_modules_gives_a_smaller_model_that_runs(variant, tiny_config):
    model = build_model(tiny_config(variant=variant)).eval()
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    k = 5
    smaller = drop_modules(model, k, inputs=x)
    assert smaller.config.n_processor == model.config.n_processor - k
    assert smaller.design().states.shape[0] == model.config.n_processor - k
    assert count_parameters(smaller) < count_parameters(model)
    out = smaller(x)
    assert out.shape == (3, 5) and torch.isfinite(out).all()
    assert model.config.n_processor == 16  # the original is untouched
    assert drop_modules(model, 0, inputs=x)(x).allclose(model(x), atol=1e-6)


def test_least_connected_modules_are_dropped_first(tiny_config):
    model = build_model(tiny_config(variant="nac"))
    with torch.no_grad():  # modules 0-3 share a direction (a clique); the rest are scattered
        sig = torch.randn(16, 8)
        sig[:4] = torch.ones(8) + 0.01 * torch.randn(4, 8)
        model.generator.signatures.copy_(sig)
    deg = expected_degree(model)
    smaller = drop_modules(model, 12)
    kept = smaller.generator.signatures
    expected = sig[torch.argsort(deg, descending=True)[:4].sort().values]
    assert torch.equal(kept, expected)
    assert set(torch.argsort(deg, descending=True)[:4].tolist()) == {0, 1, 2, 3}


def test_pruned_model_keeps_the_surviving_modules_graph(tiny_config):
    model = build_model(tiny_config(variant="nac"))
    P = model.graph.link_probabilities().detach()
    deg = module_connectivity(model)
    keep = torch.argsort(deg, descending=True)[:11].sort().values
    smaller = drop_modules(model, 5)
    assert torch.allclose(smaller.graph.link_probabilities(), P[keep][:, keep], atol=1e-6)


def test_dense_variant_needs_a_calibration_batch_and_bad_k_is_rejected(tiny_config):
    pio = build_model(tiny_config(variant="perceiver_io"))
    with pytest.raises(ValueError, match="calibration batch"):
        drop_modules(pio, 2)
    with pytest.raises(ValueError, match="between 0 and 15"):
        drop_modules(build_model(tiny_config()), 16)


def test_random_order_control_drops_a_seeded_random_subset(tiny_config):
    from nac.pruning import random_connectivity

    model = build_model(tiny_config(variant="nac")).eval()
    a, b, c = (random_connectivity(16, seed=s) for s in (0, 0, 1))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sorted(a.tolist()) == list(range(16))  # a ranking: every module once
    smaller = drop_modules(model, 10, connectivity=a)
    keep = torch.argsort(a, descending=True)[:6].sort().values
    assert torch.equal(smaller.generator.signatures, model.generator.signatures[keep])
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    assert torch.isfinite(smaller(x)).all()
