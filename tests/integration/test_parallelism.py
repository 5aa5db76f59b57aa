"""Pipeline and tensor parallelism through dsrun: `pipeline.stages` in ds_config.json splits the gpt plugin's layers
over stages of ranks (rank = stage x data-parallel size + data rank, as DeepSpeed lays them out), and the
job trains as the same global batch does without a pipeline: the same losses (fp32 within 1e-5, bf16
and fp16 within 1e-3: over 20 steps 4e-5 measured on 4 stages, 8e-6 on 2 tensor-parallel ranks, 6e-5 on 2
sequence-parallel ranks), the layout printed at start, the bytes between stages reported; checkpoints move between layouts;
what is refused is refused before training, with the key named. Tensor parallelism
(`tensor_parallel.autotp_size`, the gpt plugin's Megatron split) alone and in a 2 x 2 x 2 layout likewise, and
sequence parallelism (`sequence_parallel_size`, DeepSpeed-Ulysses) alone and in the Hugging Face example's
T x S x D = 2 x 2 x 2 layout."""
import json, os

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.002, "weight_decay": 0.1}},
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 1},
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256},
    "data": {"path": "/usr/share/common-licenses/GPL-3", "val_fraction": 0.1, "eval_interval": 3, "eval_samples": 32},
}


def metrics(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [d["loss"] for d in rows if "loss" in d], [d["val_loss"] for d in rows if "val_loss" in d]


def train(dsrun, env, tmp_path, name, ranks, cfg, steps=6):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / f"{name}.jsonl"
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", str(ranks), DSWORKER, "--model", "gpt", "--config", str(path), "--steps", str(steps),
             "--metrics", str(out)], dict(env, DSRUN_LOCAL_SLOTS=str(ranks)), timeout=300)
    return r, out


def close(a, b, tolerance):
    return len(a) == len(b) and all(abs(x - y) <= tolerance * abs(y) for x, y in zip(a, b))


def test_two_stages_of_two_ranks_train_as_two_data_parallel_ranks(dsrun, clean_env, tmp_path):
    r, out = train(dsrun, clean_env, tmp_path, "pipe", 4, dict(CONFIG, pipeline={"stages": 2, "partition": "uniform"}))
    assert r.returncode == 0, r.stderr
    assert "dsworker: pipeline: 2 stages x 2 data-parallel ranks (rank = stage x 2 + data rank)" in r.stderr
    assert "dsworker: pipeline: stage 0: ranks 0-1, layers 0-1 (embed .. h0)" in r.stderr
    assert "dsworker: pipeline: stage 1: ranks 2-3, layers 2-3 (h1 .. head)" in r.stderr
    assert "global batch 16 (micro 2 x accumulation 4 x ranks 2)" in r.stderr
    assert "sent by rank 0 per step to the other stages:" in r.stdout
    losses, val = metrics(out)
    r2, out2 = train(dsrun, clean_env, tmp_path, "flat", 2, CONFIG)
    assert r2.returncode == 0, r2.stderr
    flat_losses, flat_val = metrics(out2)
    assert len(losses) == 6 and len(val) == 2
    assert close(losses, flat_losses, 1e-5), (losses, flat_losses)
    assert close(val, flat_val, 1e-5), (val, flat_val)
    assert losses[-1] < losses[0]


def test_activation_checkpoint_interval_recomputes_with_bit_identical_losses(dsrun, clean_env, tmp_path):
    piped = dict(CONFIG, pipeline={"stages": 2, "partition": "uniform"})
    r, out = train(dsrun, clean_env, tmp_path, "kept", 2, piped)
    assert r.returncode == 0, r.stderr
    r2, out2 = train(dsrun, clean_env, tmp_path, "recomputed", 2,
                     dict(piped, pipeline=dict(piped["pipeline"], activation_checkpoint_interval=1)))
    assert r2.returncode == 0, r2.stderr
    assert metrics(out)[0] == metrics(out2)[0]

    def activations(stderr):  # "... activations 4.4 MiB" at start: layer workspaces shared when recomputing
        line = next(l for l in stderr.splitlines() if "memory per rank at start" in l)
        return line.rsplit("activations ", 1)[1]
    assert activations(r.stderr) != activations(r2.stderr), (r.stderr, r2.stderr)


def test_16_bit_pipelines_tensor_and_sequence_parallel_ranks_stay_within_1e3_of_one_rank(dsrun, clean_env, tmp_path):
    for precision in ("bf16", "fp16"):
        cfg = dict(CONFIG, model=dict(CONFIG["model"], n_head=4), **{precision: {"enabled": True}})
        r2, out2 = train(dsrun, clean_env, tmp_path, f"flat-{precision}", 1, cfg)
        assert r2.returncode == 0, r2.stderr
        flat, _ = metrics(out2)
        for name, ranks, layout in (("pipe", 4, {"pipeline": {"stages": 4}}),
                                    ("tp", 2, {"tensor_parallel": {"autotp_size": 2}}),
                                    ("sp", 2, {"sequence_parallel_size": 2})):
            r, out = train(dsrun, clean_env, tmp_path, f"{name}-{precision}", ranks, dict(cfg, **layout))
            assert r.returncode == 0, r.stderr
            losses, _ = metrics(out)
            assert close(losses, flat, 1e-3), (precision, name, losses, flat)


def test_refusals_name_the_key_before_training(dsrun, clean_env, tmp_path):
    r, _ = train(dsrun, clean_env, tmp_path, "three", 4, dict(CONFIG, pipeline={"stages": 3}))
    assert r.returncode != 0
    assert "pipeline.stages: 3 does not divide the world size 4" in r.stderr
    r, _ = train(dsrun, clean_env, tmp_path, "zero2", 2, dict(CONFIG, pipeline={"stages": 2},
                                                               zero_optimization={"stage": 2}))
    assert r.returncode != 0
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in r.stderr
    r, _ = train(dsrun, clean_env, tmp_path, "many", 8, dict(CONFIG, pipeline={"stages": 8}))
    assert r.returncode != 0
    assert "pipeline.stages: 8 stages, but the model has only 4 layers" in r.stderr


def test_checkpoints_move_between_a_pipeline_and_data_parallel_ranks(dsrun, clean_env, tmp_path):
    """A checkpoint holds the whole model whatever the layout: one saved by 2 stages x 2 ranks resumes on
    2 data-parallel ranks without a pipeline, and the other way round, continuing the same losses."""
    def with_checkpoints(cfg, name):
        return dict(cfg, checkpoint={"dir": str(tmp_path / name), "save_interval": 3})

    piped = dict(CONFIG, pipeline={"stages": 2, "partition": "uniform"})
    for saver, saver_ranks, loader, loader_ranks in ((piped, 4, CONFIG, 2), (CONFIG, 2, piped, 4)):
        name = f"from{saver_ranks}"
        r, out = train(dsrun, clean_env, tmp_path, name, saver_ranks, with_checkpoints(saver, name))
        assert r.returncode == 0, r.stderr
        straight, _ = metrics(out)
        assert (tmp_path / name / "global_step3" / "model_states.dsckpt").exists()
        path = tmp_path / f"{name}-resumed.json"
        path.write_text(json.dumps(with_checkpoints(loader, name)))
        resumed_out = tmp_path / f"{name}-resumed.jsonl"
        r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", str(loader_ranks), DSWORKER, "--model", "gpt", "--config", str(path), "--steps",
                 "6", "--resume", "global_step3", "--metrics", str(resumed_out)],
                dict(clean_env, DSRUN_LOCAL_SLOTS=str(loader_ranks)), timeout=300)
        assert r.returncode == 0, r.stderr
        assert "resumed from" in r.stderr and "step 3" in r.stderr
        resumed, _ = metrics(resumed_out)
        assert close(resumed, straight[3:], 1e-5), (resumed, straight)


def test_tensor_parallel_ranks_train_as_one_and_in_3d_as_data_parallel_ranks(dsrun, clean_env, tmp_path):
    r, out = train(dsrun, clean_env, tmp_path, "tp", 2, dict(CONFIG, tensor_parallel={"autotp_size": 2}))
    assert r.returncode == 0, r.stderr
    assert "dsworker: layout: 1 stage x 1 data-parallel x 2 tensor-parallel ranks" in r.stderr
    assert "sent per rank per step to its tensor-parallel group:" in r.stdout
    r1, out1 = train(dsrun, clean_env, tmp_path, "one", 1, CONFIG)
    assert r1.returncode == 0, r1.stderr
    assert close(metrics(out)[0], metrics(out1)[0], 1e-5), (metrics(out)[0], metrics(out1)[0])
    assert close(metrics(out)[1], metrics(out1)[1], 1e-5)

    r3, out3 = train(dsrun, clean_env, tmp_path, "3d", 8, dict(CONFIG, tensor_parallel={"autotp_size": 2},
                                                               pipeline={"stages": 2, "partition": "uniform"}))
    assert r3.returncode == 0, r3.stderr
    assert ("dsworker: layout: 2 stages x 2 data-parallel x 2 tensor-parallel ranks (rank = stage x 4 + data rank x 2 "
            "+ tensor rank)") in r3.stderr
    assert "dsworker: pipeline: stage 1: ranks 4-7, layers 2-3 (h1 .. head)" in r3.stderr
    r2, out2 = train(dsrun, clean_env, tmp_path, "dp", 2, CONFIG)
    assert r2.returncode == 0, r2.stderr
    assert close(metrics(out3)[0], metrics(out2)[0], 1e-5), (metrics(out3)[0], metrics(out2)[0])


def test_checkpoints_move_between_tensor_parallel_shares_and_one_rank(dsrun, clean_env, tmp_path):
    split = dict(CONFIG, tensor_parallel={"autotp_size": 2}, pipeline={"stages": 2, "partition": "uniform"})
    for saver, saver_ranks, loader, loader_ranks in ((split, 4, CONFIG, 1), (CONFIG, 1, split, 4)):
        name = f"tp-from{saver_ranks}"
        cfg = dict(saver, checkpoint={"dir": str(tmp_path / name), "save_interval": 3})
        r, out = train(dsrun, clean_env, tmp_path, name, saver_ranks, cfg)
        assert r.returncode == 0, r.stderr
        straight, _ = metrics(out)
        path = tmp_path / f"{name}-resumed.json"
        path.write_text(json.dumps(dict(loader, checkpoint={"dir": str(tmp_path / name)})))
        resumed_out = tmp_path / f"{name}-resumed.jsonl"
        r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", str(loader_ranks), DSWORKER, "--model", "gpt", "--config", str(path), "--steps",
                 "6", "--resume", "global_step3", "--metrics", str(resumed_out)],
                dict(clean_env, DSRUN_LOCAL_SLOTS=str(loader_ranks)), timeout=300)
        assert r.returncode == 0, r.stderr
        resumed, _ = metrics(resumed_out)
        assert close(resumed, straight[3:], 1e-5), (resumed, straight)


def test_tensor_parallel_refusals(dsrun, clean_env, tmp_path):
    r, _ = train(dsrun, clean_env, tmp_path, "odd", 3, dict(CONFIG, tensor_parallel={"autotp_size": 3}))
    assert r.returncode != 0
    assert "model.n_head: 2 heads do not split over 3 tensor-parallel ranks" in r.stderr
    r, _ = train(dsrun, clean_env, tmp_path, "nodiv", 4, dict(CONFIG, tensor_parallel={"autotp_size": 3}))
    assert r.returncode != 0
    assert "tensor_parallel.autotp_size: 3 x pipeline.stages 1 does not divide the world size 4" in r.stderr
    r, _ = train(dsrun, clean_env, tmp_path, "preset", 2, dict(CONFIG, tensor_parallel={"autotp_size": 2,
                                                                                     "preset_model": "llama"}))
    assert r.returncode != 0
    assert "tensor_parallel.preset_model: not supported by dsworker" in r.stderr


def test_sequence_parallel_ranks_train_as_one_and_in_the_hugging_face_3d_layout(dsrun, clean_env, tmp_path):
    cfg = dict(CONFIG, model=dict(CONFIG["model"], n_head=4))
    r, out = train(dsrun, clean_env, tmp_path, "sp", 2, dict(cfg, sequence_parallel_size=2))
    assert r.returncode == 0, r.stderr
    assert "dsworker: layout: 1 stage x 1 data-parallel x 2 sequence-parallel ranks" in r.stderr
    assert "global batch 8 (micro 2 x accumulation 4 x ranks 1)" in r.stderr
    assert "sent per rank per step to its sequence-parallel group:" in r.stdout
    r1, out1 = train(dsrun, clean_env, tmp_path, "one", 1, cfg)
    assert r1.returncode == 0, r1.stderr
    assert close(metrics(out)[0], metrics(out1)[0], 1e-5), (metrics(out)[0], metrics(out1)[0])
    assert close(metrics(out)[1], metrics(out1)[1], 1e-5)

    ckpt = tmp_path / "3d-ckpt"
    sample = {"prompt": "This program", "length": 20, "temperature": 0.8, "top_k": 40}
    r3, out3 = train(dsrun, clean_env, tmp_path, "tsd", 8, dict(cfg, sequence_parallel_size=2,
                                                                tensor_parallel={"autotp_size": 2}, sample=sample,
                                                                checkpoint={"dir": str(ckpt), "save_interval": 3}))
    assert r3.returncode == 0, r3.stderr
    assert "sample after step 6" in r3.stdout + r3.stderr  # predictions gathered from both splits
    assert ("dsworker: layout: 1 stage x 2 data-parallel x 2 sequence-parallel x 2 tensor-parallel ranks (rank = "
            "stage x 8 + data rank x 4 + sequence rank x 2 + tensor rank)") in r3.stderr
    r2, out2 = train(dsrun, clean_env, tmp_path, "dp", 2, cfg)
    assert r2.returncode == 0, r2.stderr
    assert close(metrics(out3)[0], metrics(out2)[0], 1e-5), (metrics(out3)[0], metrics(out2)[0])
    assert close(metrics(out3)[1], metrics(out2)[1], 1e-5)

    # The 2 x 2 x 2 checkpoint resumes on 2 data-parallel ranks, continuing the same losses.
    path = tmp_path / "resume.json"
    path.write_text(json.dumps(dict(cfg, checkpoint={"dir": str(ckpt)})))
    resumed_out = tmp_path / "resumed.jsonl"
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "gpt", "--config", str(path), "--steps", "6", "--resume",
             "global_step3", "--metrics", str(resumed_out)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert close(metrics(resumed_out)[0], metrics(out3)[0][3:], 1e-5)


def test_sequence_parallel_refusals(dsrun, clean_env, tmp_path):
    r, _ = train(dsrun, clean_env, tmp_path, "heads", 4, dict(CONFIG, sequence_parallel_size=4))
    assert r.returncode != 0
    assert "model.n_head: 2 heads do not split over 1 tensor-parallel x 4 sequence-parallel ranks" in r.stderr
    r, _ = train(dsrun, clean_env, tmp_path, "nodiv", 3, dict(CONFIG, sequence_parallel_size=2))
    assert r.returncode != 0
    assert "sequence_parallel_size: 2 does not divide the world size 3" in r.stderr
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps({"train_batch_size": 4, "sequence_parallel_size": 2}))
    r = run([dsrun, "--master_port", str(free_port()), "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode != 0
    assert "the mlp model cannot split its sequences for sequence parallelism (sequence_parallel_size 2)" in r.stderr
