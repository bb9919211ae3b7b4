"""Placement and engines of a stage's jobs (``nac.pipeline.placement``, ``nac.pipeline.slurm``):
the same training jobs pinned to two (fake, CPU-core) devices, and submitted through submitit's
local executor, give metrics byte-identical to one process running them one after another; a
submitit job killed mid-run is resubmitted and resumes from its checkpoint; every setting is read
with an error that names its variable."""

import json
import os
import time
from pathlib import Path

import pytest

from nac.pipeline import placement, pool
from nac.pipeline.envvars import EnvError

TESTS = Path(__file__).resolve().parent
ENVS = (
    pool.WORKERS_ENV,
    pool.THREADS_ENV,
    pool.EXECUTOR_ENV,
    placement.DEVICES_ENV,
    placement.PER_GPU_ENV,
    "NAC_RETRIES",
    "NAC_SUBMITIT_DIR",
    "WORLD_SIZE",
)
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two fake devices need two usable CPU cores")


def toy_job(seed: int, out: str, epochs: int = 2, progress: bool = True) -> dict:
    """One training job as a stage runs it: a tiny NAC trained on a toy task with a per-epoch
    checkpoint, its metrics written to ``out/toy-<seed>.json``. Returns where it ran."""
    import torch
    from test_overfit import Quadrants
    from tiny_models import make_tiny_config

    from nac import build_model
    from nac.training.config import TrainConfig
    from nac.training.loop import fit

    torch.manual_seed(seed)
    model = build_model(make_tiny_config(variant="modfc", num_classes=4))
    cfg = TrainConfig(
        epochs=epochs, batch_size=16, lr=3e-3, warmup_epochs=1, min_lr=1e-4, label_smoothing=0.0, seed=seed
    )
    ran = []
    res = fit(
        model,
        Quadrants(64, seed),
        Quadrants(32, 100 + seed),
        cfg,
        checkpoint=Path(out) / f"toy-{seed}.pt",
        progress=progress,
        desc=f"toy-{seed}",
        on_epoch_end=ran.append,
    )
    (Path(out) / f"toy-{seed}.json").write_text(json.dumps(res["history"], indent=2))
    return {
        "device": os.environ.get(placement.PLACED_ENV),
        "pid": os.getpid(),
        "epochs_run": ran,
        "cores": sorted(os.sched_getaffinity(0)),
        "threads": torch.get_num_threads(),
    }


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS.parent), str(TESTS)]))  # submitit's job processes
    return monkeypatch


def _jobs(out: Path, n: int = 4, epochs: int = 2) -> list[tuple]:
    out.mkdir(parents=True, exist_ok=True)
    return [(seed, str(out), epochs) for seed in range(n)]


def _metrics(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.glob("toy-*.json"))}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: the four jobs one after another in this process, no device pinned."""
    out = tmp_path_factory.mktemp("one")
    mp = pytest.MonkeyPatch()
    for name in ENVS:
        mp.delenv(name, raising=False)
    mp.setenv(pool.WORKERS_ENV, "1")
    try:
        placed = pool.run_jobs(toy_job, _jobs(out), device="cpu", desc="toy")
    finally:
        mp.undo()
    assert {p["pid"] for p in placed} == {os.getpid()} and {p["device"] for p in placed} == {None}
    metrics = _metrics(out)
    assert len(metrics) == 4
    return metrics


@pytest.mark.slow  # ~7 s; the default run keeps test_pool's two-worker order and thread tests
@TWO_CORES
def test_jobs_on_two_fake_devices_match_one_process(clean_env, tmp_path, one_process):
    clean_env.setenv(placement.DEVICES_ENV, "cpu:0,cpu:1")
    out = tmp_path / "two"
    placed = pool.run_jobs(toy_job, _jobs(out), device="cpu", desc="toy")
    cores = sorted(os.sched_getaffinity(0))
    assert {p["device"] for p in placed} == {"cpu:0", "cpu:1"}  # both devices used ...
    for p in placed:  # ... each worker pinned to its own
        assert p["cores"] == [cores[int(p["device"][4:])]] and p["threads"] == 1
    assert len({p["pid"] for p in placed}) == 2 and os.getpid() not in {p["pid"] for p in placed}
    assert _metrics(out) == one_process


@TWO_CORES
@pytest.mark.slow  # ~13 s; the smoke stage through submitit's local executor stays in the default run (test_pipeline)
def test_jobs_through_submitit_local_executor_match_one_process(clean_env, tmp_path, one_process):
    clean_env.setenv(pool.EXECUTOR_ENV, "local")
    clean_env.setenv(placement.DEVICES_ENV, "cpu:0,cpu:1")
    clean_env.setenv("NAC_SUBMITIT_DIR", str(tmp_path / "submitit"))
    out = tmp_path / "submitit-out"
    placed = pool.run_jobs(toy_job, _jobs(out), device="cpu", desc="toy")
    assert {p["device"] for p in placed} == {"cpu:0", "cpu:1"}
    assert len({p["pid"] for p in placed}) == 4 and os.getpid() not in {p["pid"] for p in placed}  # a process a job
    assert _metrics(out) == one_process
    assert list((tmp_path / "submitit" / "toy").glob("*/*_log.out"))  # its logs where NAC_SUBMITIT_DIR says


@pytest.mark.slow  # about 50 s on the shared 2-core VM (three processes start torch)
def test_a_submitit_job_killed_mid_run_is_resubmitted_and_resumes(clean_env, tmp_path, capsys):
    """The job is killed (SIGKILL, as a lost node or the OOM killer would) after its first
    checkpoint; the stage resubmits it, it resumes from that checkpoint and ends with the metrics
    of an uninterrupted run."""
    import signal
    import threading

    import psutil

    clean_env.setenv(pool.EXECUTOR_ENV, "local")
    clean_env.setenv("NAC_SUBMITIT_DIR", str(tmp_path / "submitit"))
    clean_env.setenv(pool.WORKERS_ENV, "1")
    out = tmp_path / "killed"
    jobs = _jobs(out, n=1, epochs=8)
    ckpt, killed = out / "toy-0.pt", []

    def kill_once_checkpointed():
        deadline = time.time() + 300
        while not ckpt.exists() and time.time() < deadline:
            time.sleep(0.05)
        for p in psutil.Process().children(recursive=True):  # the job's task: `python -m submitit.core._submit`
            if "submitit.core._submit" in " ".join(p.cmdline()):
                p.send_signal(signal.SIGKILL)
                killed.append(p.pid)

    killer = threading.Thread(target=kill_once_checkpointed, daemon=True)
    killer.start()
    placed = pool.run_jobs(toy_job, jobs, device="cpu", desc="toy")
    killer.join()
    assert killed and placed[0]["pid"] not in killed
    err = capsys.readouterr().err
    assert "died without a result; resubmitting it" in err, err[-3000:]
    assert len([d for d in (tmp_path / "submitit" / "toy").iterdir() if d.name.isdecimal()]) == 2  # two jobs
    assert 1 < placed[0]["epochs_run"][0] and placed[0]["epochs_run"][-1] == 8  # resumed after a saved epoch
    resumed = _metrics(out)
    ref = tmp_path / "ref"
    clean_env.setenv(pool.EXECUTOR_ENV, "pool")
    pool.run_jobs(toy_job, _jobs(ref, n=1, epochs=8), device="cpu", desc="toy")
    assert resumed == _metrics(ref)


# ---- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value, expect",
    [
        (pool.WORKERS_ENV, "²", "NAC_WORKERS='²' is not a positive integer"),  # str.isdigit() says yes
        (pool.THREADS_ENV, "four", "NAC_THREADS='four' is not a positive integer"),
        (placement.PER_GPU_ENV, "0", "NAC_JOBS_PER_GPU='0' is not a positive integer"),
        (placement.DEVICES_ENV, "gpu0", "NAC_DEVICES='gpu0': cannot read 'gpu0'; valid form: GPU indices"),
        (placement.DEVICES_ENV, "cpu:999", "NAC_DEVICES='cpu:999': cpu:999 does not exist"),
        (placement.DEVICES_ENV, "cpu:0,cpu:0", "names a device twice; .*NAC_JOBS_PER_GPU"),
        (placement.DEVICES_ENV, "cuda:0", "NAC_DEVICES='cuda:0': cuda:0 is not visible"),
        (pool.EXECUTOR_ENV, "ray", "NAC_EXECUTOR='ray'; valid choices: pool, local, slurm"),
    ],
)
def test_every_setting_is_read_with_an_error_naming_it(clean_env, name, value, expect):
    clean_env.setenv(name, value)
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(EnvError, match=expect):
        pool.run_jobs(toy_job, [(0, "/nonexistent")], device="cpu")


def test_retries_read_with_an_error_naming_them(clean_env):
    from nac.pipeline.envvars import positive_int

    clean_env.setenv("NAC_RETRIES", "0")
    assert positive_int("NAC_RETRIES", minimum=0) == 0
    clean_env.setenv("NAC_RETRIES", "-1")
    with pytest.raises(EnvError, match="NAC_RETRIES='-1' is not an integer >= 0"):
        positive_int("NAC_RETRIES", minimum=0)


def test_gpu_workers_one_per_visible_gpu_times_jobs_per_gpu_round_robin(clean_env):
    """On a (pretend) machine with GPUs 3 and 5 visible: two workers per GPU with
    NAC_JOBS_PER_GPU=2, pinned alternately; a worker's CUDA_VISIBLE_DEVICES is its GPU alone."""
    clean_env.setattr(placement, "_visible_gpus", lambda: ["3", "5"])
    clean_env.setattr(pool, "_on_gpu", lambda device: True)
    assert pool.workers_for("cuda", 10) == 2
    clean_env.setenv(placement.PER_GPU_ENV, "2")
    assert pool.workers_for("cuda", 10) == 4 and pool.workers_for("cuda", 3) == 3
    slots = placement.assign(pool.slots_for("cuda"), 4)
    assert [(s.name, s.target) for s in slots] == [("cuda:0", "3"), ("cuda:1", "5"), ("cuda:0", "3"), ("cuda:1", "5")]
    clean_env.setenv(placement.DEVICES_ENV, "1")
    assert [s.target for s in pool.slots_for("cuda")] == ["5"] and pool.workers_for("cuda", 10) == 2
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    placement.pin(slots[1])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5" and os.environ[placement.PLACED_ENV] == "cuda:1"
    clean_env.setenv("WORLD_SIZE", "2")
    assert pool.workers_for("cuda", 10) == 1 and pool.slots_for("cuda") == []  # under torchrun: the job is parallel


def test_slurm_executor_takes_the_nac_slurm_settings(clean_env, tmp_path):
    """No cluster here: the SLURM executor's parameters (what its sbatch script says) come from
    the NAC_SLURM_* variables, and a malformed one names itself."""
    import submitit

    from nac.pipeline import slurm

    clean_env.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 1))  # "srun is there"
    clean_env.setenv("NAC_SUBMITIT_DIR", str(tmp_path))
    for name, value in {
        "NAC_SLURM_PARTITION": "gpu",
        "NAC_SLURM_TIME": "90",
        "NAC_SLURM_GPUS": "2",
        "NAC_SLURM_CPUS": "12",
        "NAC_SLURM_ACCOUNT": "lab",
    }.items():
        clean_env.setenv(name, value)
    ex = slurm.make_executor("slurm", "train")
    text = ex._executor._make_submission_file_text("python -m job", "uid")
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --time=90",
        "#SBATCH --gpus-per-node=2",
        "#SBATCH --cpus-per-task=12",
        "#SBATCH --account=lab",
        "#SBATCH --job-name=nac-train",
    ):
        assert line in text, text
    clean_env.setenv("NAC_SLURM_TIME", "1:30")
    with pytest.raises(EnvError, match="NAC_SLURM_TIME='1:30' is not a positive integer"):
        slurm.make_executor("slurm", "train")


def test_the_submitit_folder_is_under_the_callers_workdir(clean_env, tmp_path):
    """tools/run_converged.py hands its work folder down (no chdir): submitit's logs and pickles go
    under it, as a relative ``NAC_SUBMITIT_DIR`` does; an absolute one stays where it is."""
    from nac.pipeline import slurm

    assert slurm._folder() == Path(".submitit") and slurm._folder(tmp_path) == tmp_path / ".submitit"
    clean_env.setenv("NAC_SUBMITIT_DIR", "logs")
    assert slurm._folder(tmp_path) == tmp_path / "logs" and slurm._folder() == Path("logs")
    clean_env.setenv("NAC_SUBMITIT_DIR", str(tmp_path / "abs"))
    assert slurm._folder(tmp_path / "work") == tmp_path / "abs"
