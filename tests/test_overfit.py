"""A tiny NAC learns: it overfits a small fixed batch of a synthetic task on CPU."""

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from nac import build_model


def quadrant_batch(n: int = 32, seed: int = 0):
    """Noisy 32 px images; the label is the quadrant holding a bright 8x8 square."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 100, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    y = torch.arange(n) % 4
    for i in range(n):
        r, c = divmod(int(y[i]), 2)
        oy, ox = torch.randint(0, 8, (2,), generator=g).tolist()
        x[i, :, 16 * r + oy : 16 * r + oy + 8, 16 * c + ox : 16 * c + ox + 8] = 255
    return x, y


class Quadrants(Dataset):
    """``quadrant_batch`` as a dataset of item dicts (``input``, ``label``), as the loop reads them."""

    def __init__(self, n, seed):
        self.x, self.y = quadrant_batch(n, seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": self.y[i]}


def test_tiny_nac_overfits_a_fixed_batch(tiny_config):
    torch.manual_seed(0)
    model = build_model(tiny_config(variant="nac", num_classes=4))
    x, y = quadrant_batch()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    max_steps, acc = 400, 0.0
    for step in range(max_steps):
        model.train()
        loss = F.cross_entropy(model(x), y) + 0.1 * model.graph.regularizer()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 9:
            model.eval()
            with torch.no_grad():
                acc = (model(x).argmax(-1) == y).float().mean().item()
            if acc >= 0.95:
                break
    assert acc >= 0.95, f"training accuracy {acc:.2%} after {max_steps} steps"
