"""The tracks beyond the Table 1 ladder: point clouds (Table 2), LRA ListOps and byte-level text
(Table 3), the conditional NAC on NLVR with its controls and the Figure 6 analysis, and few-shot
adaptation of the image track's pre-trained models (Figure 4).

Kept apart from ``nac.pipeline`` (the image track) so the two evolve without retraining each
other: DVC tracks each stage's code dependencies by directory.
"""
