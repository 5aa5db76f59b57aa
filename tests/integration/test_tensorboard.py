"""The ds_config tensorboard block: dsworker writes event files that TensorBoard's own reader loads,
with DeepSpeed's tags and x axis (global samples), read here with tensorboard from PyPI
(scripts/test-venv.sh)."""
import json, os, subprocess

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
VENV_PYTHON = os.path.join(ROOT, ".venv-tests", "bin", "python")
READER = os.path.join(os.path.dirname(__file__), "read_tensorboard.py")


def scalars(logdir):
    assert os.path.exists(VENV_PYTHON), "run scripts/test-venv.sh (TensorBoard's reader)"
    r = subprocess.run([VENV_PYTHON, READER, str(logdir)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_tensorboard_reads_our_scalars_with_deepspeeds_tags(dsrun, clean_env, tmp_path):
    with open(os.path.join(ROOT, "configs", "fp16.json")) as f:
        cfg = json.load(f)
    cfg["tensorboard"] = {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "mlp"}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    m = tmp_path / "m.jsonl"
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "7",
             "--metrics", str(m)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in m.read_text().splitlines()]
    assert len(os.listdir(tmp_path / "tb" / "mlp")) == 1  # rank 0 writes, one file per run
    s = scalars(tmp_path / "tb" / "mlp")
    assert {"Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/loss_scale",
            "Train/Samples/grad_norm"} <= set(s)
    for tag, key in (("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr"),
                     ("Train/Samples/loss_scale", "loss_scale")):
        assert [step for step, _ in s[tag]] == [row["samples"] for row in rows]  # x = global samples
        for (_, value), row in zip(s[tag], rows):
            assert abs(value - row[key]) <= 1e-6 * max(1.0, abs(row[key])), (tag, value, row[key])


def test_an_empty_output_path_is_the_working_directory(clean_env, tmp_path):
    with open(os.path.join(ROOT, "configs", "mlp.json")) as f:
        cfg = json.load(f)
    cfg["tensorboard"] = {"enabled": True}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    r = run([DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "3"], clean_env, cwd=str(tmp_path),
            timeout=60)
    assert r.returncode == 0, r.stderr
    s = scalars(tmp_path / "DeepSpeedJobName")  # DeepSpeed's default job_name under output_path ""
    assert len(s["Train/Samples/train_loss"]) == 3
