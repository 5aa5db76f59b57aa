"""dsworker through dsrun: real ranks, real Gloo over TCP, the rendezvous store with the job
token, locally and over SSH; loss falls; failures propagate with the right exit status."""
import json, os, re, subprocess, time
import pytest

from conftest import ROOT, run

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def test_two_local_ranks_train_and_the_loss_falls(dsrun, clean_env, tmp_path):
    metrics = tmp_path / "m.jsonl"
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", CONFIG, "--epochs", "4",
             "--metrics", str(metrics)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 0, r.stderr
    values = losses(metrics)
    assert len(values) == 4 * (500 // 16)  # 1000 samples / 2 ranks / (micro 8 x GAS 2) per epoch
    assert values[-1] < 0.7 * values[0], values
    assert "[rank 0] step 10/" in r.stdout and "[rank 0] done:" in r.stdout
    assert "[rank 1] step" not in r.stdout, "progress comes from rank 0 only"


def test_yaml_config_gives_the_same_run(dsrun, clean_env, tmp_path):
    out = {}
    for ext in ("json", "yaml"):
        m = tmp_path / f"{ext}.jsonl"
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config",
                 os.path.join(ROOT, "configs", f"mlp.{ext}"), "--steps", "5", "--metrics", str(m)],
                dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
        assert r.returncode == 0, r.stderr
        out[ext] = losses(m)
    assert out["json"] == out["yaml"]


def test_a_run_is_bit_for_bit_repeatable(dsrun, clean_env, tmp_path):
    runs = []
    for i in range(2):
        m = tmp_path / f"{i}.jsonl"
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "15",
                 "--metrics", str(m)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
        assert r.returncode == 0, r.stderr
        runs.append(losses(m))
    assert runs[0] == runs[1]


def test_over_ssh_on_two_hosts(dsrun, sshd, hostfile, clean_env, tmp_path):
    metrics = tmp_path / "m.jsonl"
    hf = hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")
    r = run([dsrun, "-H", hf, *sshd.ssh_args(), "--master_port", "29731", DSWORKER, "--model", "mlp",
             "--config", CONFIG, "--epochs", "2", "--metrics", str(metrics)], clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    values = losses(metrics)
    assert values[-1] < values[0]


def test_a_bad_config_exits_2_through_dsrun(dsrun, clean_env, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stagee": 1}}))
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(bad), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=60)
    assert r.returncode == 2
    assert "stagee" in r.stderr and "stage" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--steps", "0"], "--steps: must be at least 1 (got 0)"),
    (["--epochs", "-2"], "--epochs: must be at least 1 (got -2)"),
    (["--lr", "-0.1"], "--lr: must be at least 0 (got -0.1)"),
    (["--steps", "ten"], "--steps: ten is not a number"),
])
def test_a_bad_number_option_exits_2_naming_its_bound(clean_env, args, message):
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, *args], clean_env, timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


@pytest.mark.parametrize("model,block,message", [
    ("mlp", {"hiden": 64}, "model.hiden: unknown key (did you mean 'hidden'?)"),
    ("mlp", {"hidden": 0}, "model.hidden: 0 is not >= 1"),
    ("gpt", {"n_embed": 64}, "model.n_embed: unknown key (did you mean 'n_embd'?)"),
    ("gpt", {"n_embd": 10, "n_head": 4}, "model.n_embd: 10 is not a multiple of model.n_head 4"),
])
def test_a_bad_model_block_exits_2_naming_the_key(dsrun, clean_env, tmp_path, model, block, message):
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg["model"] = block
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    r = run([DSWORKER, "--model", model, "--config", str(path), "--steps", "1"], clean_env, timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", model, "--config", str(path), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=60)
    assert r.returncode == 2, r.stderr  # through dsrun: the first failing rank's status


def test_a_rank_that_dies_ends_the_job_with_its_status(dsrun, clean_env, tmp_path):
    # The metrics path, unique to this test, tells its ranks from other tests' running beside it (ctest -j).
    metrics = str(tmp_path / "dies.jsonl")
    proc = subprocess.Popen([dsrun, "--num_gpus", "2", "--kill_grace", "2", DSWORKER, "--model", "mlp",
                             "--config", CONFIG, "--epochs", "1000", "--metrics", metrics],
                            env=dict(clean_env, DSRUN_LOCAL_SLOTS="2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:  # find rank 1's pid
        out = subprocess.run(["pgrep", "-f", metrics], capture_output=True, text=True).stdout.split()
        for pid in out:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if b"RANK=1" in f.read().split(b"\0"):
                        victim = int(pid)
            except OSError:
                pass
        time.sleep(0.2)
    assert victim, "rank 1 never started"
    time.sleep(1.0)
    os.kill(victim, 9)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 137, err
    assert "rank 1 on localhost killed by SIGKILL" in err


def test_print_config_resolves_the_batch_for_the_world_size(clean_env):
    r = run([DSWORKER, "--config", CONFIG, "--print_config"], dict(clean_env, WORLD_SIZE="4", RANK="0"))
    assert r.returncode == 0, r.stderr
    resolved = json.loads(r.stdout)
    assert resolved["train_batch_size"] == 8 * 2 * 4
    assert resolved["gradient_accumulation_steps"] == 2


def test_runs_alone_without_dsrun(clean_env, tmp_path):
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "3"], clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "done: 3 steps" in r.stdout


def test_comms_logger_and_csv_monitor(dsrun, clean_env, tmp_path):
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg["comms_logger"] = {"enabled": True}
    cfg["csv_monitor"] = {"enabled": True, "output_path": str(tmp_path / "csv"), "job_name": "mlp"}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "6"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "allreduce" in r.stdout  # the comms summary from rank 0
    rows = (tmp_path / "csv" / "mlp" / "Train_Samples_train_loss.csv").read_text().splitlines()
    assert rows[0] == "samples,train_loss" and len(rows) == 7
    assert rows[1].startswith("32,")  # global samples after step 1: 8 x 2 x 2 ranks


def test_wall_clock_breakdown_prints_and_records_each_steps_phases(dsrun, clean_env, tmp_path):
    """DeepSpeed's wall_clock_breakdown: rank 0 prints its global timers after each step ("time (ms) | fwd: ... |
    step: ..."), and the monitors get Train/Samples/elapsed_time_ms_* (here the JSONL line and csv_monitor).
    The phases are parts of the step: they add up to no more than its wall time. Off by default."""
    with open(CONFIG) as f:
        cfg = json.load(f)
    runs = {}
    for on in (True, False):
        cfg["wall_clock_breakdown"] = on
        cfg["csv_monitor"] = {"enabled": True, "output_path": str(tmp_path / f"csv{on}"), "job_name": "mlp"}
        path = tmp_path / f"cfg{on}.json"
        path.write_text(json.dumps(cfg))
        m = tmp_path / f"m{on}.jsonl"
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "4",
                 "--metrics", str(m)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
        assert r.returncode == 0, r.stderr
        runs[on] = (r.stdout, [json.loads(line) for line in m.read_text().splitlines()])
    out, rows = runs[True]
    lines = re.findall(r"^\[rank (\d)\] time \(ms\) \| fwd: ([\d.]+) \| bwd: ([\d.]+) \| bwd_inner: ([\d.]+) \| "
                       r"bwd_allreduce: ([\d.]+) \| step: ([\d.]+)$", out, re.M)
    assert len(lines) == 4 and {rank for rank, *_ in lines} == {"0"}, out
    keys = ["elapsed_time_ms_" + k for k in ("forward", "backward", "backward_inner", "backward_allreduce", "step")]
    for (_, *printed), row in zip(lines, rows):
        assert [float(v) for v in printed] == [round(row[k], 2) for k in keys]
        assert row[keys[0]] > 0 and row[keys[2]] > 0 and row[keys[4]] > 0
        assert abs(row[keys[1]] - row[keys[2]] - row[keys[3]]) < 1e-6  # bwd = bwd_inner + bwd_allreduce
        step_ms = 1e3 * 32 / row["samples_per_sec"]  # 32 samples per step
        assert row[keys[0]] + row[keys[1]] + row[keys[4]] <= step_ms * 1.001, row
    csv = (tmp_path / "csvTrue" / "mlp" / "Train_Samples_elapsed_time_ms_forward.csv").read_text().splitlines()
    assert csv[0] == "samples,elapsed_time_ms_forward" and len(csv) == 5
    out, rows = runs[False]
    assert "time (ms)" not in out and not any(k in row for row in rows for k in keys)
    assert not (tmp_path / "csvFalse" / "mlp" / "Train_Samples_elapsed_time_ms_forward.csv").exists()


@pytest.mark.parametrize("key,block,expected", [
    ("zero_optimization", {"stage": 2, "zero_quantized_gradients": True}, "zero_optimization.zero_quantized_gradients"),
    ("communication_data_type", "fp16", "communication_data_type: fp16"),
    ("activation_checkpointing", {"cpu_checkpointing": True}, "activation_checkpointing.cpu_checkpointing"),
])
def test_unimplemented_features_are_refused_not_ignored(dsrun, clean_env, tmp_path, key, block, expected):
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg[key] = block
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    r = run([DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "1"], clean_env, timeout=60)
    assert r.returncode == 2 and expected in r.stderr and "not implemented" in r.stderr


def test_ds_accelerator_cuda_needs_a_usable_gpu_and_other_values_are_refused(clean_env):
    """DS_ACCELERATOR=cuda (dsrun sets it on GPU machines): without a usable GPU an error naming CUDA's
    (exit 1); with one, the layers on the GPU, and saying so. Another value is an error naming it."""
    gpu = subprocess.run([DSWORKER, "--selftest"], env=clean_env, capture_output=True, timeout=300).returncode != 3
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "1"], dict(clean_env, DS_ACCELERATOR="cuda"),
            timeout=60)
    if gpu:
        assert r.returncode == 0, r.stderr
        assert "dsworker: device: the layers run on cuda:0, " in r.stderr
    else:
        assert r.returncode == 1, r.stderr
        assert re.search(r"DS_ACCELERATOR=cuda, but no (usable GPU: cuda: |GPU is visible)", r.stderr), r.stderr
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "1"], dict(clean_env, DS_ACCELERATOR="cpu"),
            timeout=60)
    assert r.returncode == 0 and "DS_ACCELERATOR" not in r.stderr, r.stderr
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "1"], dict(clean_env, DS_ACCELERATOR="tpu"),
            timeout=60)
    assert r.returncode == 2 and "DS_ACCELERATOR='tpu' is not one of cpu, cuda (from the environment)" in r.stderr


def test_a_missing_plugin_is_a_clear_error(clean_env):
    r = run([DSWORKER, "--model", "nosuchmodel", "--config", CONFIG, "--steps", "1"], clean_env, timeout=60)
    assert r.returncode == 1 and "libds_model_nosuchmodel.so" in r.stderr


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_configs_train_like_stage_0(dsrun, clean_env, tmp_path, stage):
    """configs/zero{1,2,3}.json through dsrun on 2 ranks: the same losses as the same config at stage 0."""
    with open(os.path.join(ROOT, "configs", f"zero{stage}.json")) as f:
        cfg = json.load(f)
    cfg["zero_optimization"] = {"stage": 0}
    stage0 = tmp_path / "stage0.json"
    stage0.write_text(json.dumps(cfg))
    out = {}
    for name, path in (("zero", os.path.join(ROOT, "configs", f"zero{stage}.json")), ("stage0", str(stage0))):
        m = tmp_path / f"{name}.jsonl"
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", path, "--steps", "30",
                 "--metrics", str(m)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
        assert r.returncode == 0, r.stderr
        out[name] = losses(m)
        assert "memory per rank at start" in r.stderr and "sent per rank per step: " in r.stdout
    assert len(out["zero"]) == 30 and out["zero"][-1] < 0.8 * out["zero"][0]
    assert max(abs(a - b) for a, b in zip(out["zero"], out["stage0"])) < 1e-4


def model_states_and_rss(stdout):
    """(model-state bytes, peak RSS bytes) from rank 0's 'memory per rank at peak' line."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    line = next(l for l in stdout.splitlines() if "memory per rank at peak" in l)
    states = re.search(r"model states ([0-9.]+) (\w+)", line)
    rss = re.search(r"peak RSS ([0-9.]+) (\w+)", line)
    return (float(states[1]) * units[states[2]], float(rss[1]) * units[rss[2]])


def test_zero_stage_3_halves_model_state_memory_of_a_50m_model_on_2_ranks(dsrun, clean_env, tmp_path):
    """A 48.3M-parameter MLP of 46 layers (fp32, Adam) on 2 ranks: stage 0 holds 16 bytes per parameter
    on each rank, stage 3 16/2 plus one gathered layer and two gradient buckets of one layer each
    (6% of stage 0 here); the process's peak RSS falls with it."""
    with open(os.path.join(ROOT, "configs", "zero3.json")) as f:
        cfg = json.load(f)
    cfg["model"] = {"in_features": 1024, "hidden": 1024, "layers": 46, "classes": 10, "num_samples": 64}
    cfg["gradient_accumulation_steps"] = 1
    measured = {}
    for stage in (0, 3):
        cfg["zero_optimization"]["stage"] = stage
        path = tmp_path / f"stage{stage}.json"
        path.write_text(json.dumps(cfg))
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "2"],
                dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=300)
        assert r.returncode == 0, r.stderr
        measured[stage] = model_states_and_rss(r.stdout)
    states = measured[3][0] / measured[0][0]
    rss = measured[3][1] / measured[0][1]
    assert 0.45 < states < 0.56, measured
    assert rss < 0.65, measured


def metrics_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_fp16_and_bf16_configs_train_like_fp32(dsrun, clean_env, tmp_path):
    """configs/fp16.json and configs/bf16.json (ZeRO 2, 2 ranks) against the same config in fp32
    (configs/zero2.json): every step's loss within 2% (measured 0.7% after 30 steps: 16-bit rounding
    makes the trajectories drift apart slowly), the precision named in the start line."""
    out = {}
    for name in ("zero2", "fp16", "bf16"):
        m = tmp_path / f"{name}.jsonl"
        r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config",
                 os.path.join(ROOT, "configs", f"{name}.json"), "--steps", "30", "--metrics", str(m)],
                dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
        assert r.returncode == 0, r.stderr
        out[name] = metrics_rows(m)
    assert "ZeRO stage 2, bf16 (gradients bf16)" in r.stderr
    for name in ("fp16", "bf16"):
        assert not any(row["skipped"] for row in out[name])
        worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(out[name], out["zero2"]))
        assert worst < 0.02, (name, worst)
    assert {row["loss_scale"] for row in out["fp16"]} == {65536.0}  # 2^16; 30 clean steps < window 1000
    assert {row["loss_scale"] for row in out["bf16"]} == {1.0}


def fp16_config_with_overflows(tmp_path, **fp16):
    with open(os.path.join(ROOT, "configs", "fp16.json")) as f:
        cfg = json.load(f)
    cfg["fp16"].update(fp16)
    cfg["model"]["inject_nonfinite_grad_steps"] = [3, 4, 5, 9]
    path = tmp_path / "fp16.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_fp16_overflows_skip_steps_and_move_the_loss_scale_as_deepspeed(dsrun, clean_env, tmp_path):
    """The mlp plugin puts +inf into a gradient at steps 3, 4, 5, 9; scale 2^8, window 3, hysteresis 2.
    DeepSpeed's ZeRO scaler: step 3 uses the hysteresis, 4 and 5 halve the scale; 3 clean steps later
    (step 8) it doubles and the hysteresis refills; 9 uses it; step 11 completes 3 clean steps and the
    scale doubles for step 12. Skipped steps do not advance the LR schedule."""
    m = tmp_path / "m.jsonl"
    config = fp16_config_with_overflows(tmp_path, initial_scale_power=8, loss_scale_window=3, hysteresis=2)
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", config, "--steps", "12",
             "--metrics", str(m)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 0, r.stderr
    rows = metrics_rows(m)
    assert [row["loss_scale"] for row in rows] == [256, 256, 256, 256, 128, 64, 64, 64, 128, 128, 128, 128]
    assert [row["step"] for row in rows if row["skipped"]] == [3, 4, 5, 9]
    assert rows[2]["lr"] == rows[5]["lr"] < rows[6]["lr"]  # step 6 applies the LR step 3 would have
    assert "[rank 0] step 3: overflow, skipping; loss scale 256 -> 256" in r.stdout
    assert "[rank 0] step 4: overflow, skipping; loss scale 256 -> 128" in r.stdout
    assert "[rank 0] step 5: overflow, skipping; loss scale 128 -> 64" in r.stdout
    assert "4 skipped on overflow, loss scale 256" in r.stdout


def test_fp16_overflow_at_the_minimum_scale_stops_the_job(dsrun, clean_env, tmp_path):
    config = fp16_config_with_overflows(tmp_path, initial_scale_power=8, min_loss_scale=256, hysteresis=1)
    r = run([dsrun, "--num_gpus", "2", DSWORKER, "--model", "mlp", "--config", config, "--steps", "12"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="2"), timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "step 3: fp16: a gradient overflowed at the minimum loss scale 256" in r.stderr


def test_activation_checkpointing_changes_nothing_but_memory(clean_env, tmp_path):
    """With an activation_checkpointing block every layer's forward runs again before its backward,
    from one shared workspace: the losses are bit-identical to a run without it."""
    with open(os.path.join(ROOT, "configs", "zero3.json")) as f:
        cfg = json.load(f)
    out = {}
    for name, block in (("plain", None), ("recompute", {"partition_activations": False})):
        if block is not None:
            cfg["activation_checkpointing"] = block
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        m = tmp_path / f"{name}.jsonl"
        r = run([DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "20", "--metrics", str(m)],
                clean_env, timeout=60)
        assert r.returncode == 0, r.stderr
        out[name] = losses(m)
    assert out["recompute"] == out["plain"]


def test_a_flag_given_twice_takes_the_last_value(clean_env):
    """scripts/demo.sh passes --steps 600 and then the user's arguments: `--steps 40` must win."""
    r = run([DSWORKER, "--model", "mlp", "--config", CONFIG, "--steps", "5", "--steps", "2"], clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "done: 2 steps" in r.stdout


def test_initialising_the_parameters_holds_no_fp32_copy_of_the_whole_model(dsrun, clean_env, tmp_path):
    # bf16 at ZeRO 1 on 8 ranks: each rank keeps the bf16 parameters and gradients, 1/8 of the fp32
    # master and moments. Initialising the parameters tensor by tensor (rank 0's values broadcast, each
    # rounded as it comes) keeps a rank's peak RSS within half the model's fp32 size of the model states
    # and activations it reports (measured: 58 MiB over them, where the bound is 97); an fp32 copy of the
    # whole model built first, as before 2026-11-28, put it 188 MiB over.
    cfg = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
           "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
           "model": {"n_layer": 4, "n_head": 8, "n_embd": 1024, "seq_len": 16, "vocab_size": 256},
           "data": {"path": os.path.join(ROOT, "README.md"), "val_fraction": 0}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    r = run([dsrun, "--num_gpus", "8", DSWORKER, "--model", "gpt", "--config", str(path), "--steps", "1"],
            dict(clean_env, DSRUN_LOCAL_SLOTS="8"), timeout=180)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "[rank 0] memory per rank at peak: " in l)
    mib = lambda what: float(re.search(what + r" ([\d.]+) MiB", line).group(1))
    params16, states, activations, peak = mib("params"), mib(r"\(model states"), mib("activations"), mib("peak RSS")
    fp32_model = 2 * params16
    assert peak - states - activations < fp32_model / 2, line


def test_bf16_start_line_names_the_kernel_and_says_when_bf16_is_no_faster(clean_env, tmp_path):
    """In bf16 dsworker names what multiplies the products; where the CPU has no bf16 units (here: oneDNN held
    to AVX2, as on such a CPU) it adds that bf16 is no faster than fp32 there. With the units, no such line."""
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg["bf16"] = {"enabled": True}
    path = tmp_path / "bf16.json"
    path.write_text(json.dumps(cfg))
    hint = "; this CPU has no AMX or AVX-512-BF16 units: bf16 is no faster than fp32 here"
    r = run([DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "1"],
            dict(clean_env, ONEDNN_MAX_CPU_ISA="AVX2"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "(bf16 matmuls with fp32 accumulation on sgemm on rounded operands, the other ops in fp32)" + hint \
        in r.stderr, r.stderr
    flags = open("/proc/cpuinfo").read()
    units = re.search(r"\b(amx_bf16|avx512_bf16)\b", flags) is not None
    r = run([DSWORKER, "--model", "mlp", "--config", str(path), "--steps", "1"], clean_env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (hint in r.stderr) == (not units), r.stderr
