"""Measurement code the benchmark scripts (``bench/``) and the ``costs`` stage share: the models
they build at the paper's sizes, timing with confidence intervals, and the op counter. The
training code never imports it; the scripts in ``bench/`` are command lines over it."""
