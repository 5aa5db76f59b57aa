"""The learning rates dsworker trains with under torch.optim.lr_scheduler's classes, which DeepSpeed builds by
name from the config's scheduler.type, against torch's own scheduler stepped as DeepSpeed steps it: once when
it is made (that sets the first update's lr), then after every optimizer step. torch's step() multiplies the
previous lr, dsworker evaluates torch's closed forms: they agree to rounding (1e-12 relative).

Needs Debian's python3-torch (scripts/install-deps.sh); skipped only when torch cannot be imported."""
import json, os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: apt-get install python3-torch)")
from conftest import ROOT, run  # noqa: E402

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
STEPS, BASE_LR = 14, 0.05
SCHEDULERS = {
    "StepLR": {"step_size": 3, "gamma": 0.5},
    "MultiStepLR": {"milestones": [9, 2, 5, 5], "gamma": 0.3},
    "ConstantLR": {"factor": 0.25, "total_iters": 4},
    "LinearLR": {"start_factor": 0.2, "end_factor": 0.9, "total_iters": 6},
    "ExponentialLR": {"gamma": 0.8},
    "PolynomialLR": {"total_iters": 10, "power": 1.5},
    "CosineAnnealingLR": {"T_max": 5, "eta_min": 0.001},
    "CosineAnnealingWarmRestarts": {"T_0": 2, "T_mult": 2, "eta_min": 0.001},
}


def torch_lrs(name, params):
    """The lr of each of STEPS updates under torch's scheduler, stepped as DeepSpeed steps it."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=BASE_LR)
    scheduler = getattr(torch.optim.lr_scheduler, name)(optimizer, **params)
    lrs = []
    for _ in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("name", SCHEDULERS)
def test_each_update_runs_at_torchs_lr(dsrun, clean_env, tmp_path, name):
    cfg = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "SGD", "params": {"lr": BASE_LR}},
           "scheduler": {"type": name, "params": SCHEDULERS[name]}}
    config, metrics = tmp_path / "ds_config.json", tmp_path / "m.jsonl"
    config.write_text(json.dumps(cfg))
    r = run([dsrun, "--num_gpus", "1", DSWORKER, "--model", "mlp", "--config", str(config), "--steps", str(STEPS),
             "--metrics", str(metrics)], dict(clean_env, DSRUN_LOCAL_SLOTS="1"), timeout=120)
    assert r.returncode == 0, r.stderr
    with open(metrics) as f:
        ours = [json.loads(line)["lr"] for line in f]
    want = torch_lrs(name, SCHEDULERS[name])
    assert len(ours) == STEPS
    for k, (a, b) in enumerate(zip(ours, want), start=1):
        assert abs(a - b) <= 1e-12 * abs(b), (k, ours, want)
    assert len(set(want)) >= 2  # the schedule moves within the run
