"""The GPT job through dsrun and dsworker: a text corpus from the config's data block, validation
passes, a generated sample, token throughput in the progress line and the metrics, the loss-curve
PNG, and the errors a wrong data or sample block gives."""
import json, os, subprocess, sys
import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
PLOT = os.path.join(ROOT, "scripts", "plot_loss.py")
TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.\n")


def config(tmp_path, corpus, **overrides):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 10,
         "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.0}},
         "zero_optimization": {"stage": 2},
         "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256},
         "data": {"path": str(corpus), "val_fraction": 0.2, "eval_interval": 20, "eval_samples": 16},
         "sample": {"prompt": "it was the ", "length": 40, "temperature": 0.5, "top_k": 5}}
    c.update(overrides)
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(c))
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text(TEXT * 12)
    (d / "b.txt").write_text(TEXT * 12)
    return d


def dsworker(dsrun, env, cfg, *args, ranks=2, timeout=180):
    return run([dsrun, "--num_gpus", str(ranks), "--master_port", str(free_port()), DSWORKER, "--model", "gpt",
                "--config", cfg, *args],
               dict(env, DSRUN_LOCAL_SLOTS=str(ranks)), timeout=timeout)


def test_gpt_trains_on_text_validates_and_samples(dsrun, clean_env, tmp_path, corpus):
    metrics = tmp_path / "m.jsonl"
    r = dsworker(dsrun, clean_env, config(tmp_path, corpus), "--steps", "60", "--metrics", str(metrics))
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [x for x in records if "loss" in x]
    vals = [x for x in records if "val_loss" in x]
    assert [x["step"] for x in steps] == list(range(1, 61))
    assert [x["step"] for x in vals] == [20, 40, 60]
    assert all(x["tokens_per_sec"] == pytest.approx(x["samples_per_sec"] * 32) for x in steps)
    assert steps[-1]["loss"] < 0.5 * steps[0]["loss"], (steps[0], steps[-1])
    assert vals[-1]["val_loss"] < vals[0]["val_loss"] < steps[0]["loss"]
    out = r.stdout
    assert "[rank 0] step 60: validation loss" in out
    assert "[rank 0] step 60/60 [####################] 100% |" in out and "tokens/s | ETA 0s" in out
    assert "sample after step 60 (temperature 0.5, top_k 5):\n[rank 0] it was the " in out
    assert "validation loss" in out.split("[rank 0] done:")[1].splitlines()[0]
    assert "data: 2 files, 4.10 k tokens (byte-level), 3.28 k train / 821 validation; 256 tokens per step" in r.stderr
    # The model learnt the text: the greedy-ish continuation repeats words of it.
    sample = out.split("top_k 5):\n")[1].split("[rank 0] ----")[0].replace("[rank 0] ", "")
    assert sum(word in TEXT for word in sample.split()) >= len(sample.split()) // 2, sample


def test_the_same_job_at_stage_3_gives_the_same_losses_as_stage_0(dsrun, clean_env, tmp_path, corpus):
    runs = {}
    for stage in (0, 3):
        m = tmp_path / f"{stage}.jsonl"
        cfg = config(tmp_path, corpus, zero_optimization={"stage": stage})
        r = dsworker(dsrun, clean_env, cfg, "--steps", "20", "--metrics", str(m))
        assert r.returncode == 0, r.stderr
        runs[stage] = [json.loads(line) for line in m.read_text().splitlines()]
    for a, b in zip(runs[0], runs[3]):
        key = "loss" if "loss" in a else "val_loss"
        assert b[key] == pytest.approx(a[key], rel=1e-5)


@pytest.mark.parametrize("change, message", [
    ({"data": {"path": "/nonexistent/x*.txt"}}, "data.path: '/nonexistent/x*.txt' matches no file"),
    ({"data": {"path": "CORPUS", "eval_interval": -5}}, "data.eval_interval: -5 is not an integer >= 0"),
    ({"data": {"path": "CORPUS", "val_fraction": 0.02}},
     "data: validation uses 2 windows (of 2 in the split, data.eval_samples 512), fewer than one micro-batch on each rank (4 x 1 ranks)"),
    ({"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 128}},
     "data.path: the corpus's vocabulary (256, byte-level) is larger than the model's (128, model.vocab_size)"),
    ({"sample": {"temprature": 1.0}}, "sample.temprature: unknown key"),
    ({"data": {}}, "the model (gpt) has no data of its own: give the config a `data` block"),
])
def test_bad_data_or_sample_blocks_are_config_errors(dsrun, clean_env, tmp_path, corpus, change, message):
    if "data" in change and change["data"].get("path") == "CORPUS":
        change["data"]["path"] = str(corpus)
    r = dsworker(dsrun, clean_env, config(tmp_path, corpus, **change), "--steps", "2", ranks=1)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_a_model_with_its_own_data_refuses_a_data_block(dsrun, clean_env, tmp_path, corpus):
    cfg = json.load(open(os.path.join(ROOT, "configs", "mlp.json")))
    cfg["data"] = {"path": str(corpus)}
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(cfg))
    r = run([dsrun, "--num_gpus", "1", "--master_port", str(free_port()), DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="1"), timeout=60)
    assert r.returncode == 2
    assert "data: the model mlp brings its own dataset (1000 samples); remove the data block" in r.stderr


def test_plot_loss_draws_a_png_from_the_metrics(tmp_path):
    metrics = tmp_path / "m.jsonl"
    lines = [{"step": s, "loss": 5.0 / s} for s in range(1, 30)] + [{"step": 10, "val_loss": 0.7}]
    metrics.write_text("".join(json.dumps(x) + "\n" for x in lines))
    png = tmp_path / "loss.png"
    r = subprocess.run([sys.executable, PLOT, str(metrics), str(png)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "29 steps, 1 validation passes" in r.stdout
    metrics.write_text('{"step": 1, "loss": 2.0}\nnot json\n')
    r = subprocess.run([sys.executable, PLOT, str(metrics), str(png)], capture_output=True, text=True)
    assert r.returncode == 1 and f"{metrics}:2: not a metrics line" in r.stderr
