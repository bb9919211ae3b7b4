"""The paper's published numbers (docs/reference.md), to set beside ours, and the places where the
paper, the authors' code and this suite differ (the report's Discrepancies section, ``discrepancies.yaml``)."""

from pathlib import Path

import yaml

# Table 1: Tiny-ImageNet validation (IID) and Tiny-ImageNet-R (OOD), Acc@1 / Acc@5, percent.
TABLE1 = {
    "perceiver_io": (58.89, 80.09, 17.57, 37.16),
    "modfc": (58.91, 79.43, 18.01, 37.05),
    "frozen_graph": (58.31, 80.06, 18.50, 37.92),
    "nac-scale_free": (60.76, 80.86, 19.52, 38.52),
    "nac-planted_partition": (60.71, 81.34, 19.42, 39.84),
    "nac-ring_of_cliques": (60.54, 81.18, 20.03, 40.44),
    "nac-erdos_renyi": (60.33, 81.08, 19.83, 39.32),
}
TABLE1_COLUMNS = ("iid_acc1", "iid_acc5", "ood_acc1", "ood_acc5")

RUN_LABELS = {
    "perceiver_io": "Perceiver IO",
    "modfc": "+ ModFC",
    "frozen_graph": "+ Sparse graph (not learnable)",
    "nac-scale_free": "NAC, scale-free prior",
    "nac-planted_partition": "NAC, planted-partition prior",
    "nac-ring_of_cliques": "NAC, ring-of-cliques prior",
    "nac-erdos_renyi": "NAC, Erdos-Renyi prior",
}
_PRIOR_NAMES = {
    "scale_free": "scale-free",
    "planted_partition": "planted-partition",
    "ring_of_cliques": "ring-of-cliques",
    "erdos_renyi": "Erdos-Renyi",
}
RUN_LABELS.update(
    {"neural_interpreter": "Neural Interpreter (baseline)", "modular_network": "Modular Network (baseline)"}
)
RUN_LABELS.update(
    {f"nac-{p}-noreg": f"NAC, {name} prior, regularizer off (control)" for p, name in _PRIOR_NAMES.items()}
)
RUN_LABELS.update(
    {f"nac-{p}-randinit": f"NAC, {name} prior, random initial signatures (control)" for p, name in _PRIOR_NAMES.items()}
)

PRIOR_LABELS = {
    "scale_free": "Scale-free",
    "planted_partition": "Planted partition",
    "ring_of_cliques": "Ring of cliques",
    "erdos_renyi": "Erdos-Renyi",
}

# Table 2: ModelNet40 test accuracy (percent); the Hierarchical Perceiver rows are from Carreira et al.
TABLE2 = {
    "Hierarchical Perceiver (no MAE)": {"points": 75.9},
    "Perceiver IO": {"points": 77.4},
    "Hierarchical Perceiver (with MAE)": {"points": 80.6},
    "NAC": {"points": 83.0},
}
# Table 3: Long Range Arena test accuracy (percent), ListOps / byte-level text classification.
TABLE3 = {
    "Transformer": {"listops": 37.13, "text": 65.35},
    "Linformer": {"listops": 37.38, "text": 56.12},
    "Perceiver IO": {"listops": 39.70, "text": 66.50},
    "NAC": {"listops": 41.40, "text": 68.18},
}
LRA_LEADERBOARD_TRANSFORMER = {"listops": 36.37, "text": 64.27}
# NLVR2 validation accuracy (percent, section 4.4): conditional NAC "approximately 64%", CLIP zero-shot 53%.
NLVR = {"conditional": 64.0, "clip_zero_shot": 53.0}
# Abstract: "~10% better than Perceiver IO in low-shot" (8-way CIFAR and CUB), no per-shot numbers.
FEWSHOT_CLAIM = 10.0

TRACK_LABELS = {"points": "Point clouds", "listops": "ListOps", "text": "Byte-level text", "nlvr": "NLVR"}
TRACK_RUN_LABELS = {
    "perceiver_io": "Perceiver IO",
    "nac": "NAC",
    "conditional": "Conditional NAC",
    "text_only": "Text-only NAC (control)",
    "image_only": "Image-only NAC (control)",
}
# Which published row each of our runs sits beside.
PAPER_ROW = {"perceiver_io": "Perceiver IO", "nac": "NAC"}

# One entry per difference or choice: its topic and one or two precise sentences (the prose lives
# in discrepancies.yaml beside this file, read by `discrepancies()`).
DISCREPANCIES_FILE = Path(__file__).with_name("discrepancies.yaml")


def discrepancies() -> list[tuple[str, str]]:
    """The (topic, text) pairs of ``discrepancies.yaml``, in order, each checked for its two fields."""
    rows = yaml.safe_load(DISCREPANCIES_FILE.read_text(encoding="utf-8"))
    if not isinstance(rows, list):
        raise ValueError(f"{DISCREPANCIES_FILE}: expected a list of {{topic, text}} entries, got {type(rows).__name__}")
    out = []
    for i, row in enumerate(rows):
        if (
            not isinstance(row, dict)
            or set(row) != {"topic", "text"}
            or not all(isinstance(row[k], str) and row[k].strip() for k in ("topic", "text"))
        ):
            raise ValueError(
                f"{DISCREPANCIES_FILE}: entry {i} must have exactly a non-empty `topic` and `text` "
                f"(strings), got {row!r}"
            )
        out.append((row["topic"], row["text"]))
    return out
