"""DeepSpeed's communication-compressed optimizers through dsrun and dsworker on the gpt plugin at 2
ranks: 1-bit Adam trains about as far as Adam while sending >= 8x fewer bytes per step after its
warm-up; 0/1 Adam and 1-bit LAMB train; all three resume from checkpoints with the phase derived
from the step (1-bit Adam bit-identically when resumed in its warm-up).

The loss bound for 1-bit Adam vs Adam (300 steps, betas (0.9, 0.99), freeze_step 150, mean loss of
the last 20 steps): the gap has two parts. (1) The compression: with error feedback the compressed
momentum's sum over steps is the true one minus a bounded error, and on this job the 2-rank
compressed run ends no worse than the same optimizer uncompressed at 1 rank with the same global
batch (seed 42: 0.40 vs 0.54). (2) The algorithm: v frozen at step 150 and no bias correction, at
lr 0.01 on a tiny model, which a bad seed can throw off course. Gaps to Adam measured over seeds 42,
1, 2: 0.24, 0.05, 0.08 nats on an Intel Xeon (AVX-512), 0.36, 0.09, 0.23 on an AMD EPYC (AVX2: other
BLAS kernels, another trajectory; seeds 3 and 4 there: 1.48 and 0.17); Adam itself varied by 0.07
between seeds (0.16-0.23). So one seed's gap is no test; the median of seeds 42, 1, 2 is (0.08 and
0.23 on those machines). Bound on the median: the largest median seen plus Adam's seed spread,
rounded up: 0.35 nats, and 1-bit Adam's median must reach a tenth of the initial loss (5.56 nats).
"""
import json, os
import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, "
        "it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.\n")
LOSS_BOUND = 0.35  # nats, on the median gap over SEEDS, derived in the module docstring
SEEDS = (42, 1, 2)


@pytest.fixture
def corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text(TEXT * 12)
    (d / "b.txt").write_text(TEXT * 12)
    return d


def config(tmp_path, corpus, optimizer, name, ckpt=None):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 50,
         "gradient_clipping": 0.0, "optimizer": optimizer, "zero_optimization": {"stage": 0},
         "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256},
         "data": {"path": str(corpus), "val_fraction": 0.2, "eval_interval": 0, "eval_samples": 16}}
    if ckpt:
        c["checkpoint"] = {"dir": str(ckpt)}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(c))
    return str(path)


def train(dsrun, env, cfg, steps, metrics, ranks=2, seed=None):
    seed_args = ["--seed", str(seed)] if seed is not None else []
    r = run([dsrun, "--num_gpus", str(ranks), "--master_port", str(free_port()), DSWORKER, "--model", "gpt",
             "--config", cfg, "--steps", str(steps), "--metrics", str(metrics), *seed_args],
            dict(env, DSRUN_LOCAL_SLOTS=str(ranks), OMP_NUM_THREADS="1"), timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def steps_of(path):
    return [x for x in map(json.loads, open(path).read().splitlines()) if "loss" in x]


def model_states_header(tag_dir):
    """The JSON header of a checkpoint's model_states file (runtime/checkpoint/README.md)."""
    data = (tag_dir / "model_states.dsckpt").read_bytes()
    length = int.from_bytes(data[16:24], "little")
    return json.loads(data[24:24 + length])


def mean_loss(records, last):
    return sum(x["loss"] for x in records[-last:]) / last


def adam(**params):
    return {"type": "Adam", "params": {"lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.0, **params}}


def onebit_adam(freeze_step, lr=0.01):
    return {"type": "OneBitAdam", "params": {"lr": lr, "betas": [0.9, 0.99], "freeze_step": freeze_step}}


def test_onebit_adam_trains_like_adam_and_sends_8x_fewer_bytes_after_its_warmup(dsrun, clean_env, tmp_path, corpus):
    runs = {}
    for seed in SEEDS:
        for name, optimizer in (("adam", adam()), ("onebit", onebit_adam(150))):
            metrics = tmp_path / f"{name}{seed}.jsonl"
            r = train(dsrun, clean_env, config(tmp_path, corpus, optimizer, name), 300, metrics, seed=seed)
            runs[name, seed] = steps_of(metrics)
            runs[name + "_out", seed] = r.stdout
    a, o = runs["adam", SEEDS[0]], runs["onebit", SEEDS[0]]
    assert [x["step"] for x in o] == list(range(1, 301))
    assert all(x["averaged_gradients"] for x in o[:150]) and not any(x["averaged_gradients"] for x in o[150:])
    # Warm-up: the engine's gradient all-reduce, byte for byte Adam's.
    assert all(x["sent_bytes"] == y["sent_bytes"] for x, y in zip(o[:150], a[:150]))
    # After it: every step sends at least 8x fewer bytes (the gradient all-reduce becomes packed signs).
    ratios = [y["sent_bytes"] / x["sent_bytes"] for x, y in zip(o[150:], a[150:])]
    print(f"bytes per step: Adam {a[-1]['sent_bytes']}, OneBitAdam {o[-1]['sent_bytes']} ({min(ratios):.1f}x fewer)")
    assert min(ratios) >= 8
    onebit_out = runs["onebit_out", SEEDS[0]]
    assert "alltoall" in onebit_out.split("sent per rank per step:")[1].splitlines()[0]
    assert "step 151: OneBitAdam: the engine's gradient all-reduce is off" in onebit_out
    assert "gradient all-reduce is off" not in runs["adam_out", SEEDS[0]]
    gaps = sorted(mean_loss(runs["onebit", s], 20) - mean_loss(runs["adam", s], 20) for s in SEEDS)
    onebit_losses = sorted(mean_loss(runs["onebit", s], 20) for s in SEEDS)
    print(f"1-bit Adam's loss minus Adam's, last 20 steps, seeds {SEEDS}: {gaps}")
    assert gaps[len(gaps) // 2] <= LOSS_BOUND
    assert onebit_losses[len(SEEDS) // 2] < 0.1 * o[0]["loss"]


def test_onebit_adam_resumed_in_its_warmup_is_bit_identical(dsrun, clean_env, tmp_path, corpus):
    straight, resumed = tmp_path / "straight.jsonl", tmp_path / "resumed.jsonl"
    train(dsrun, clean_env, config(tmp_path, corpus, onebit_adam(20), "straight"), 40, straight)
    cfg = config(tmp_path, corpus, onebit_adam(20), "resumed", ckpt=tmp_path / "ckpt")
    train(dsrun, clean_env, cfg, 10, resumed)
    r = train(dsrun, clean_env, cfg, 40, resumed)  # from global_step10; the errors start at the switch in both
    assert "resumed from" in r.stderr
    assert [x["loss"] for x in steps_of(resumed)] == [x["loss"] for x in steps_of(straight)]


@pytest.mark.parametrize("optimizer", [
    onebit_adam(40, lr=0.005),
    {"type": "ZeroOneAdam", "params": {"lr": 0.003, "betas": [0.9, 0.99], "var_freeze_step": 40,
                                       "var_update_scaler": 16, "local_step_scaler": 10, "local_step_clipper": 4}},
    {"type": "OneBitLamb", "params": {"lr": 0.01, "freeze_step": 20}},
], ids=["OneBitAdam", "ZeroOneAdam", "OneBitLamb"])
def test_compressed_optimizers_train_and_resume_in_their_compressed_phase(dsrun, clean_env, tmp_path, corpus, optimizer):
    straight, resumed = tmp_path / "straight.jsonl", tmp_path / "resumed.jsonl"
    train(dsrun, clean_env, config(tmp_path, corpus, optimizer, "straight"), 100, straight)
    cfg = config(tmp_path, corpus, optimizer, "resumed", ckpt=tmp_path / "ckpt")
    train(dsrun, clean_env, cfg, 55, resumed)
    r = train(dsrun, clean_env, cfg, 100, resumed)
    assert "resumed from" in r.stderr and "global_step55: step 55" in r.stderr
    s, t = steps_of(straight), steps_of(resumed)
    assert [x["step"] for x in t] == list(range(1, 101))
    assert [x["loss"] for x in t[:55]] == [x["loss"] for x in s[:55]]
    # The phase comes from the step: the same collectives, byte for byte, on every resumed step.
    assert [(x["averaged_gradients"], x["sent_bytes"]) for x in t[55:]] == \
           [(x["averaged_gradients"], x["sent_bytes"]) for x in s[55:]]
    assert not t[-1]["averaged_gradients"]
    if optimizer["type"] == "OneBitLamb":  # its per-tensor numbers travel in model_states' header
        scalars = model_states_header(tmp_path / "ckpt" / "global_step55")["optimizer_scalars"]
        assert [x["name"] for x in scalars] == ["lamb_coeff_freeze", "last_factor", "scaling_coeff"]
        assert all(len(x["values"]) == len(scalars[0]["values"]) > 0 for x in scalars)
    # It trains; the resumed run (its errors zeroed at the load, so another trajectory) stays where
    # the load left it (by step 55 both runs are on a plateau, around 2.6-2.7 nats, where "still
    # falling" would be noise: no step above 1.25x the 10 before the load) and ends within 25% of
    # the straight one.
    assert mean_loss(s, 10) < 0.6 * s[0]["loss"]
    assert max(x["loss"] for x in t[55:]) < 1.25 * mean_loss(t[:55], 10)
    assert abs(mean_loss(t, 10) - mean_loss(s, 10)) < 0.25 * mean_loss(s, 10)


def test_a_zero_stage_other_than_0_is_refused_naming_the_key_and_the_optimizer(dsrun, clean_env, tmp_path, corpus):
    cfg = json.loads(open(config(tmp_path, corpus, onebit_adam(20), "zero2")).read())
    cfg["zero_optimization"] = {"stage": 2}
    path = tmp_path / "zero2.json"
    path.write_text(json.dumps(cfg))
    r = run([dsrun, "--num_gpus", "1", "--master_port", str(free_port()), DSWORKER, "--model", "gpt", "--config",
             str(path), "--steps", "1"], dict(clean_env, DSRUN_LOCAL_SLOTS="1"), timeout=60)
    assert r.returncode == 2
    assert "zero_optimization.stage: 2: optimizer OneBitAdam needs stage 0" in r.stderr

