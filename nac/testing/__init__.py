"""The plain reference forms of the speed work (like ``torch.testing``): what the equality tests
prove the fast forms equal to, and what bench/ times as the plain forms.

- ``nac.testing.reference_forms``: the per-layer code modulation, the read-in's direct eq. 4, the
  Neural Interpreter's layers as printed, the LR schedule as a formula;
- ``nac.testing.reference_kernel``: the kernel's plain forms, given to a model in place of its
  kernel draws (``NAC.graph.kernel_sampler``, ``NAC.graph.kernel_samplers``).

Imported by tests/ and bench/ only, never by the model, training or stage code
(``tests/test_imports.py`` checks it), so no DVC stage depends on these files.
"""
