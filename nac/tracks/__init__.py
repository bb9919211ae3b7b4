"""One module per track: ``image`` (the Table 1 ladder, IID/OOD evaluation, pruning), ``common``
(point clouds, Table 2; LRA ListOps and byte-level text, Table 3; the conditional NAC on NLVR),
``nlvr`` (the Figure 6 analysis), ``fewshot`` (Figure 4) and ``pretrain`` (its source models).
Each validates its own params sections; the shared plumbing is ``nac.pipeline``. A stage imports
only its track, so DVC reruns it only when that track's code (or the plumbing) changes.
"""
