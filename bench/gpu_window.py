"""One prepared GPU window (issue 35): everything a short GPU loan should measure, in one
command that ends inside 9 minutes and writes one folder.

Started on a fresh GPU machine with the repository root as the working directory:

    python bench/gpu_window.py --out "$OUT"          # or set $OUT and leave --out out
    python bench/gpu_window.py --plan                # what would run in the window, no GPU needed
    python bench/gpu_window.py --cpu-dry-run --out /tmp/window   # every part, tiny, on the CPU

Parts, in order, each in a process of its own with its own time share (``PARTS``: a part is
skipped, and the JSON says why, when less than its ``need_s`` is left of the window; it is
stopped at its ``share_s``, its results so far kept):

* ``machine`` (in this process, first): GPU, driver, torch, CUDA, cuDNN, Triton, CPUs and the
  output of ``nvidia-smi``.
* ``step_eager``, ``step_compiled``, ``step_cudagraphs``: the bf16 training step at batch 128 of
  the ``paper`` profile's Tiny-ImageNet Perceiver IO and NAC (``image.ladder``'s
  ``perceiver_io`` and ``nac-scale_free``, 64 px, 200 classes, untrained), taken as
  ``nac.training.loop.fit`` takes it (``loop.train_step``: forward, loss with the graph
  regularizer, backward, the paper's clipping (none), AdamW; without the loader, augmentation,
  EMA and the schedule), eager; with the whole step compiled (``train.compile: default``,
  ``train.compile_scope: step``); and compiled with CUDA graphs (``train.compile:
  reduce-overhead``, scope ``step``). Per model: the first step's seconds (the compilation) and
  the next two apart from the steady state; dynamo's graphs, breaks and recompiles; host syncs
  per step seen by torch's own sync debug mode (``torch.cuda.set_sync_debug_mode("warn")``, the
  Python lines that caused them); the peak CUDA memory of a step. Then interleaved blocks of
  steps of the two models (as many of ``--blocks`` as fit the part's share): seconds per step,
  images/s and the NAC / Perceiver IO ratio, mean and 95% t CI over blocks.
* ``throughput``: Figure 5b on the GPU, the paper-size NAC with 0% and 87.5% of its processor
  modules dropped (least connected first by ``random_connectivity``), whole model and executor,
  bf16, at each ``--eval-batch`` (``nac.bench.models.pruned_throughput``).
* ``converged``: in the time left, pieces of the converged run: ``python tools/run_converged.py
  --budget <minutes>`` (the converged issue's piece-wise command). If the tool's ``--help`` names
  no ``--budget`` the part is not run and the JSON says so (an unbounded converged run would
  outlive the window).

The output folder (at most ``MAX_FILES`` files): ``gpu_window.json`` (every part's results,
the plan as it ran: shares, seconds, skipped parts and why; provenance: commit, code
fingerprint (``nac.provenance``), a hash of the benchmark scripts, params hash, machine, start and
end), ``window.log`` (this command's and its parts' output), ``nvidia-smi.txt`` and, when the
converged part ran, ``converged.tar.gz`` (its log and ``results/converged/``).

``--cpu-dry-run`` runs every part at the ``smoke`` profile's image-model size on the CPU (its
signature fit cut to 20 steps), batch 4, with ``aot_eager`` standing in for both compiled modes
(CUDA graphs and inductor's GPU kernels need CUDA) and no sync counts or CUDA memory (nothing to
see on the CPU): what it proves is that the parts run end to end and write the folder, not any
number. Without a CUDA device and without ``--cpu-dry-run`` (or ``--plan``) the command refuses
with one line and exit code 1.
"""

from __future__ import annotations

import sys

from nac.bench.window import main

if __name__ == "__main__":
    sys.exit(main())
