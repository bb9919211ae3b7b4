"""The paper's published numbers (REFERENCE.md), to set beside ours."""

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

PRIOR_LABELS = {
    "scale_free": "Scale-free",
    "planted_partition": "Planted partition",
    "ring_of_cliques": "Ring of cliques",
    "erdos_renyi": "Erdos-Renyi",
}
