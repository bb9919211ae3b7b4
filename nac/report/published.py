"""The paper's published numbers (docs/reference.md), to set beside ours, and the places where the
paper, the authors' code and this suite differ (the report's Discrepancies section)."""

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
_PRIOR_NAMES = {"scale_free": "scale-free", "planted_partition": "planted-partition", "ring_of_cliques": "ring-of-cliques",
                "erdos_renyi": "Erdos-Renyi"}
RUN_LABELS.update({"neural_interpreter": "Neural Interpreter (baseline)", "modular_network": "Modular Network (baseline)"})
RUN_LABELS.update({f"nac-{p}-noreg": f"NAC, {name} prior, regularizer off (control)" for p, name in _PRIOR_NAMES.items()})
RUN_LABELS.update({f"nac-{p}-randinit": f"NAC, {name} prior, random initial signatures (control)"
                   for p, name in _PRIOR_NAMES.items()})

PRIOR_LABELS = {
    "scale_free": "Scale-free",
    "planted_partition": "Planted partition",
    "ring_of_cliques": "Ring of cliques",
    "erdos_renyi": "Erdos-Renyi",
}

# Table 2: ModelNet40 test accuracy (percent); the Hierarchical Perceiver rows are from Carreira et al.
TABLE2 = {"Hierarchical Perceiver (no MAE)": {"points": 75.9}, "Perceiver IO": {"points": 77.4},
          "Hierarchical Perceiver (with MAE)": {"points": 80.6}, "NAC": {"points": 83.0}}
# Table 3: Long Range Arena test accuracy (percent), ListOps / byte-level text classification.
TABLE3 = {"Transformer": {"listops": 37.13, "text": 65.35}, "Linformer": {"listops": 37.38, "text": 56.12},
          "Perceiver IO": {"listops": 39.70, "text": 66.50}, "NAC": {"listops": 41.40, "text": 68.18}}
LRA_LEADERBOARD_TRANSFORMER = {"listops": 36.37, "text": 64.27}
# NLVR2 validation accuracy (percent, section 4.4): conditional NAC "approximately 64%", CLIP zero-shot 53%.
NLVR = {"conditional": 64.0, "clip_zero_shot": 53.0}
# Abstract: "~10% better than Perceiver IO in low-shot" (8-way CIFAR and CUB), no per-shot numbers.
FEWSHOT_CLAIM = 10.0

TRACK_LABELS = {"points": "Point clouds", "listops": "ListOps", "text": "Byte-level text", "nlvr": "NLVR"}
TRACK_RUN_LABELS = {"perceiver_io": "Perceiver IO", "nac": "NAC", "conditional": "Conditional NAC",
                    "text_only": "Text-only NAC (control)", "image_only": "Image-only NAC (control)"}
# Which published row each of our runs sits beside.
PAPER_ROW = {"perceiver_io": "Perceiver IO", "nac": "NAC"}

# One entry per difference or choice: (topic, one or two precise sentences).
DISCREPANCIES = [
    ("Attention (Eq. 5)", "Eq. 5 of the paper is printed without a softmax; like the authors' code, we use softmax "
     "attention with pre-LN residual blocks."),
    ("Dropped biases", "The read-in and SKMDPA key biases and the read-out confidence bias are dropped: under the "
     "softmax their gradient is identically zero (they add the same constant to every score of a query)."),
    ("Initial states", "The initial module states (the MLP of the authors' code) are rescaled to unit standard "
     "deviation and the Perceiver IO latents are initialised N(0, 1) instead of N(0, 0.02): with small states all "
     "modules started as near-copies and training stalled at chance in the embedded profiles."),
    ("Tiny-ImageNet-R classes", "The paper says 64 classes and docs/reference.md's list has 63 wnids while stating 62; the "
     "authors' code uses 62 (its set lacks n02480855), and we follow the code (62)."),
    ("Erdos-Renyi target", "The authors' code has no Erdos-Renyi target; we use one seeded G(n, p=0.1) sample as the "
     "target matrix."),
    ("Prior targets and matching", "As the authors: the targets keep their formula's value on the diagonal and the "
     "regularizer makes one Hungarian matching per kernel, summed over every propagator's kernel. Our earlier unit "
     "diagonal and wider matching search (never worse) are options (target_diagonal, matching; the switch table). "
     "The mechanism tables' distance to each prior uses the wider search and the unit diagonal: it is a measurement, "
     "and the formula's diagonal would add a different constant for each prior."),
    ("Kernel truncation and bandwidth", "As in every authors' Tiny-ImageNet template (not stated in the paper): the "
     "kernel is truncated at cosine distance 0.9 (P = 0 exactly beyond it; in the authors' default mode a cut pair "
     "gets exactly zero gradient, from the regularizer and the attention alike, so nothing pulls it back; the "
     "masked mode, which gives it the untruncated P's gradient, is an option) and each propagator and the read-out "
     "has its own kernel with a learnable bandwidth initialised at 1 (decayed, as the authors' Tiny filter does). Without "
     "truncation P >= e^-2 for every pair and the mean off-diagonal P of unit signatures is at least ~0.36, so no "
     "sparse prior is reachable. The paper profile's few-shot ImageNet pre-training follows the authors' ImageNet "
     "templates instead (fixed bandwidth, no truncation)."),
    ("Signature initialisation", "As in the authors' code: NAC signatures start fitted to a graph sampled from the "
     "NAC's own prior (orthogonal init, hinge loss against the truncation distance, 1000 Adam steps at lr 1e-3); the "
     "frozen-graph rung is fitted to a Barabasi-Albert graph (m = 2) the same way. The authors' Tiny-ImageNet "
     "template starts from a watts-strogatz preset whatever the regularizer; we start each NAC from its own prior "
     "so that the priors differ from the first step. The fit is the authors' plain mean hinge over all pairs (no "
     "margin, no class balancing, no early stop, no rescaling); our earlier margin fit with unit-norm rows is the "
     "option signature_fit: margin (the switch table)."),
    ("Graph-prior block count", "The authors' planted-partition and ring-of-cliques targets use 10 blocks (at 320 "
     "mediators) and need n divisible by the block count. Our processor counts (16 smoke, 32 mini, 256 paper) are "
     "not multiples of 10, so both priors use 8 blocks (2, 4 and 32 modules per block)."),
    ("Ring-of-cliques target", "As in the authors' code: p_in inside each clique, p_out elsewhere, and the first node "
     "of each clique linked (1.0) to every node of its own and the next clique, with no wrap-around from the last "
     "clique to the first (networkx's ring_of_cliques differs)."),
    ("Controls", "Not in the paper: the headline NAC is trained beside two controls with the same seeds, one with "
     "the regularizer off and one from random signatures; module dropping is compared with 3 random orders; the "
     "kernel is ablated at evaluation (dense attention, same weights). They make the NAC-specific claims falsifiable."),
    ("Which template", "The paper does not say which authors' configuration produced Table 1; our paper profile "
     "follows TINY-INET-NC-X (256 processor modules, truncation 0.9, learnable bandwidth) and adds the scale-free "
     "and other regularizers at weight 0.1, which that template lacks but the paper describes. Every other switch "
     "follows the paper where it is explicit and that template where it is silent; template=m2mkd selects m2mKD's "
     "choices and template=nac_v1 this suite's earlier ones (the switch table). No public template combines the "
     "truncation at 0.9 with a graph prior: under the authors' zero-gradient truncation the scale-free and "
     "Erdos-Renyi regularizers cut nearly every link of the 32-module mini NACs (the mechanism table)."),
    ("Augmentation", "The paper profile's Tiny-ImageNet track uses the authors' recipe built from timm (RandAugment "
     "rand-m9-mstd0.5-inc1, bicubic, random erasing 0.25, repeated augmentation x3 with DeiT's epoch length, "
     "mixup 0.8 / cutmix 1.0 switched per batch, label smoothing 0.1); colour jitter 0.4 is ignored while "
     "RandAugment is on, as in timm and the authors' copy of it. The evaluation-time resize and centre crop are "
     "not implemented. The embedded profiles use flip and 4 px translation only; the other paper tracks and the "
     "ImageNet pre-training use flip and translation or nothing (no recipe recorded)."),
    ("Tokenizers", "The conv32 tokenizer of the embedded profiles uses BatchNorm; the paper's Tiny-ImageNet tokenizer "
     "is ConvNeXt-style, giving 4x4 tokens in the authors' code against the \"8x8\" of the paper's text."),
    ("Few-shot pre-training (Figure 4)", "The paper fine-tunes the official 48-layer ImageNet Perceiver IO (82.1%) "
     "against its own 8-layer NAC (77%, 1024 modules); this suite pre-trains both itself (paper profile: the "
     "authors' ImageNet settings with an assumed batch size of 1024; embedded profiles: the image track's shapes "
     "models)."),
    ("Few-shot protocol", "The fine-tuning protocol (steps, learning rate, frozen tokenizer, a new classifier head, "
     "nested support sets, shared episodes for both models) is ours: the paper's appendix is not available. The "
     "paper profile's CIFAR target is CIFAR-10 (the paper says \"CIFAR\")."),
    ("NLVR inputs", "The paper uses frozen CLIP features; the embedded profiles use learned word embeddings and a "
     "conv tokenizer on generated image pairs (nlvr_shapes), whose generator labels each sentence's reasoning type."),
    ("NLVR reasoning types", "NLVR2 has no reasoning-type labels, so the paper profile assigns types by a keyword "
     "rule (nac.tracks.common.sentence_reasoning_type)."),
    ("NLVR models", "The conditional NAC has no graph prior (as in the paper); the text-only and image-only controls "
     "are unconditional NACs with the `prior` group's prior and are not in the paper. No CLIP zero-shot baseline is "
     "computed."),
    ("Tables 2 and 3 hyper-parameters", "docs/reference.md records no hyper-parameters for point clouds or LRA; the paper "
     "profile uses the Tiny-ImageNet NAC's sizes and optimiser settings (our choice), and ModelNet40 and byte-level "
     "IMDB have no validation split, so their test split doubles as validation."),
    ("Embedded stand-ins", "Each dataset has a generated or bundled stand-in in the embedded profiles (sizes of the "
     "mini profile): shapes / shapes_r for Tiny-ImageNet / -R; digits and shapes_novel for CUB and CIFAR; "
     "pointclouds (12 parametric primitives, 256 points) for ModelNet40; listops (LRA's generator at lengths "
     "20-100) for LRA ListOps; bytes (generated reviews of 512 bytes) for byte-level IMDB; nlvr_shapes for NLVR2."),
    ("Training length", "The paper trains Table 1's models 400 epochs. The mini profile trains them 6 (its 45-minute "
     "budget on 2 CPU cores), far from a plateau: Perceiver IO and the scale-free NAC reach about 25-29% validation "
     "Acc@1 there; the model before the authors' switches plateaued at about 99% after 96 epochs "
     "(bench/bench_convergence.py, 3 seeds; docs/convergence.md). Smaller batches, "
     "higher learning rates, a narrower tokenizer, fewer training images, less rotation and smaller images were each "
     "measured and none reaches a plateau within that budget (docs/convergence.md). So mini's "
     "accuracy verdicts are about early training; the headline comparison and the kernel ablation near the plateau "
     "come from the bench runs on every seed (claims ood_gain_long, iid_gain_long, kernel_matters_long), which are "
     "not part of dvc repro."),
    ("Byte-level text tokenizer", "The paper's models read raw bytes; the paper profile embeds single bytes. In the "
     "embedded profiles both models stayed at exactly 50% with single-byte embeddings (measured on mini, 5 epochs), "
     "so the text track there embeds hashed byte trigrams (`text.ngram`, 4096 buckets): still raw bytes in, with "
     "local context in the tokenizer."),
    ("NLVR stand-in shortcut", "In nlvr_shapes the image pair alone carries some signal (scenes are re-drawn until "
     "the statement has the wanted truth value, which shifts their statistics): the image-only control is above "
     "chance, most on spatial statements. Compare the conditional NAC with that control, not with 50%."),
    ("NLVR analysis control", "Not in the paper: the Figure 6 measures are also computed for a freshly initialised "
     "model of the same configuration. P is a function of the sentence, so reasoning types cluster even before "
     "training; only the excess over this control is learned."),
    ("ListOps splits", "The embedded listops generator drops duplicate sequences within and across splits (LRA does "
     "not state this; the paper profile reads LRA's own files as they are)."),
    ("Baselines", "Neural Interpreters and Modular Networks are not in the paper. Neither has a runnable public "
     "implementation; ours follow their papers and the authors' code as recorded in docs/reference.md. Both train "
     "through the same loop, data, seeds and stages as Table 1. The Neural Interpreter reads NAC's tokenizer "
     "instead of its 4x4 patch embedding (same tokens for every architecture), and implements eq. 11 literally "
     "(no gating); the Modular Network's pooling layout is our choice (libmodular's cifar10 example gives none). "
     "On the other tracks, mini runs Table 1's Neural Interpreter on ListOps (Table 3, its own rows) with the "
     "track's token embedding; on point clouds and byte-level text it attends over every one of 256 / 512 "
     "tokens (no latent bottleneck; 445 s a point-cloud run against ~20 s for the NAC), so mini leaves it out "
     "(<track>.runs can add it), and the paper profile runs neither track with it (neither its paper nor its "
     "code does). The Modular Network's convolutional modules take images only: no track but the image one."),
    ("Baselines in few-shot (Figure 4)", "The Neural Interpreter follows its paper's fine-tuning protocol: a new CLS "
     "token and a new head train, every pre-trained parameter stays frozen (new functions are optional, "
     "fewshot.protocol.ni_new_functions, off by default: 2.1x the cost for no gain on mini). The Modular Network's "
     "paper has no few-shot protocol; it gets this suite's (a new head, and every parameter outside freeze trains: its "
     "modules) with the controller's mode selection frozen and no EM. All models see the same episodes, steps and "
     "optimiser; the baselines adapt only the image track's checkpoints, not an ImageNet pre-training."),
    ("Statistics", "The paper reports single numbers; we report means over seeds (or few-shot episodes) with Student-t "
     "95% CIs. Differences between models trained with the same seeds (same data order) are paired by seed; "
     "few-shot differences are paired across shared episodes. We compare differences (NAC − Perceiver IO) with the "
     "paper's differences, never absolute accuracies, since the stand-in datasets differ from the paper's."),
]
