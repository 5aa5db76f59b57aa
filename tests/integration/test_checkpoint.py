"""Checkpoints through dsrun and dsworker: an interrupted run resumed from `latest` is bit-identical
to one straight run (fp32 and bf16, ZeRO stages 0-3, 2 ranks); a checkpoint loads at another world
size and stage; ranks killed with SIGKILL at random moments, saves included, always leave a loadable
checkpoint, and the next start removes the temporary files the killed saves left; a run resumed at
or past its --steps trains nothing and says so; damaged or mismatched checkpoints are clear errors."""
import json, os, random, signal, socket, subprocess, time
import pytest

from conftest import ROOT, run
from throwaway_sshd import free_port

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7 % 13}\n" for i in range(300))


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return path


ADAMW = {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}
MUON = {"type": "Muon", "params": {"lr": 0.02, "adam_lr": 0.003, "weight_decay": 0.1}}


def config(tmp_path, corpus, ckpt_dir, stage=2, bf16=False, name="c.json", optimizer=ADAMW, **model):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 100,
         "optimizer": optimizer,
         "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.003, "warmup_num_steps": 5}},
         "gradient_clipping": 1.0, "zero_optimization": {"stage": stage}, "bf16": {"enabled": bf16},
         "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 32, "vocab_size": 256, **model},
         "data": {"path": str(corpus), "val_fraction": 0.0},
         "checkpoint": {"dir": str(ckpt_dir), "save_interval": 5}}
    path = tmp_path / name
    path.write_text(json.dumps(c))
    return str(path)


def train(dsrun, env, cfg, steps, metrics, ranks=2, extra=(), timeout=120):
    return run([dsrun, "--num_gpus", str(ranks), "--master_port", str(free_port()), DSWORKER, "--model", "gpt",
                "--config", cfg, "--steps", str(steps), "--metrics", str(metrics), *extra],
               dict(env, DSRUN_LOCAL_SLOTS=str(ranks)), timeout=timeout)


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


# (Muon too, whose state on a partition is the ranks' parts of the matrices' momentum)
@pytest.mark.parametrize("bf16,stage,optimizer", [(bf16, stage, ADAMW) for bf16 in (False, True) for stage in range(4)]
                         + [(True, 0, MUON), (True, 2, MUON)],
                         ids=[f"{p}-{s}" for p in ("fp32", "bf16") for s in range(4)] + ["muon-0", "muon-2"])
def test_a_resumed_run_is_bit_identical_to_a_straight_one(dsrun, clean_env, tmp_path, corpus, stage, bf16, optimizer):
    straight = config(tmp_path, corpus, tmp_path / "a", stage, bf16, "a.json", optimizer)
    r = train(dsrun, clean_env, straight, 20, tmp_path / "a.jsonl")
    assert r.returncode == 0, r.stderr
    split = config(tmp_path, corpus, tmp_path / "b", stage, bf16, "b.json", optimizer)
    r = train(dsrun, clean_env, split, 10, tmp_path / "b.jsonl")
    assert r.returncode == 0, r.stderr
    r = train(dsrun, clean_env, split, 20, tmp_path / "b.jsonl")
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stderr and "global_step10: step 10" in r.stderr
    assert losses(tmp_path / "b.jsonl") == losses(tmp_path / "a.jsonl")  # the metrics file continues
    for rank in range(2 if stage > 0 else 1):  # unpartitioned: rank 0 writes everything
        name = f"global_step20/rank_{rank:05}_optim_states.dsckpt"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), \
            "the final master weights and optimizer state are bit-identical"


def test_a_checkpoint_loads_at_another_world_size_and_stage(dsrun, clean_env, tmp_path, corpus):
    full = config(tmp_path, corpus, tmp_path / "a", 2, False, "a.json")
    assert train(dsrun, clean_env, full, 20, tmp_path / "a.jsonl").returncode == 0
    saved = config(tmp_path, corpus, tmp_path / "b", 2, False, "b.json")
    assert train(dsrun, clean_env, saved, 10, tmp_path / "b.jsonl").returncode == 0
    # resumed on 1 rank at stage 3 (micro-batch 8 keeps the global batch of 8)
    c = json.loads(open(saved).read())
    c["zero_optimization"]["stage"] = 3
    c["train_micro_batch_size_per_gpu"] = 8
    (tmp_path / "one.json").write_text(json.dumps(c))
    r = train(dsrun, clean_env, str(tmp_path / "one.json"), 20, tmp_path / "b.jsonl", ranks=1)
    assert r.returncode == 0, r.stderr
    a, b = losses(tmp_path / "a.jsonl"), losses(tmp_path / "b.jsonl")
    assert len(a) == len(b) == 20
    assert a[:10] == b[:10]
    # the same samples per step, summed in another order: fp32 rounding only
    assert all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a[10:], b[10:])), list(zip(a[10:], b[10:]))


def test_sigkill_at_random_moments_always_leaves_a_loadable_checkpoint(dsrun, clean_env, tmp_path, corpus):
    cfg = json.loads(open(config(tmp_path, corpus, tmp_path / "ck")).read())
    cfg["checkpoint"]["save_interval"] = 1  # a save every step: kills land inside saves too
    cfg["checkpoint"]["keep_last"] = 2
    cfg["model"].update(n_layer=3, n_embd=64)
    (tmp_path / "k.json").write_text(json.dumps(cfg))
    rng = random.Random(5)
    for attempt in range(4):
        proc = subprocess.Popen([dsrun, "--num_gpus", "2", "--master_port", str(free_port()), DSWORKER, "--model",
                                 "gpt", "--config", str(tmp_path / "k.json"), "--steps", "100000"],
                                env=dict(clean_env, DSRUN_LOCAL_SLOTS="2"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(1.0 + rng.random())
        os.killpg(proc.pid, signal.SIGKILL)  # dsrun, its agent and both ranks at once
        proc.wait(timeout=30)
        time.sleep(0.3)
        assert (tmp_path / "ck" / "latest").exists()
    tag = (tmp_path / "ck" / "latest").read_text().strip()
    start = int(tag.removeprefix("global_step"))
    r = train(dsrun, clean_env, str(tmp_path / "k.json"), start + 3, tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    assert f"global_step{start}: step {start}" in r.stderr
    assert f"saved checkpoint {tmp_path / 'ck'}/global_step{start + 3}" in r.stdout
    assert list((tmp_path / "ck").rglob("*.tmp.*")) == [], "the killed saves' temporaries were removed"


def test_a_start_removes_the_temporaries_that_killed_saves_of_this_host_left(dsrun, clean_env, tmp_path, corpus):
    cfg = config(tmp_path, corpus, tmp_path / "ck")
    assert train(dsrun, clean_env, cfg, 5, tmp_path / "m.jsonl").returncode == 0
    writer = subprocess.Popen(["sleep", "60"])  # stands for a rank SIGKILLed while saving: its pid is dead
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    host, ck, tag = socket.gethostname(), tmp_path / "ck", tmp_path / "ck" / "global_step5"
    stale = [tag / f"rank_00000_optim_states.dsckpt.tmp.{host}.{writer.pid}", ck / f"latest.tmp.{host}.{writer.pid}"]
    kept = [tag / f"rank_00001_optim_states.dsckpt.tmp.node-b.{writer.pid}",  # another host's (a shared filesystem)
            tag / f"model_states.dsckpt.tmp.{host}.{os.getpid()}"]  # its writer is alive
    for path in stale + kept:
        path.write_bytes(b"partial")
    r = train(dsrun, clean_env, cfg, 7, tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    assert [p.exists() for p in stale] == [False, False] and [p.exists() for p in kept] == [True, True]
    assert f"dsworker: removed {stale[0]} (left by a save that was killed)" in r.stderr
    assert "global_step5: step 5" in r.stderr  # and the run resumed as usual


def test_a_run_resumed_at_or_past_its_steps_trains_nothing_and_says_so(dsrun, clean_env, tmp_path, corpus):
    cfg = config(tmp_path, corpus, tmp_path / "ck")
    assert train(dsrun, clean_env, cfg, 10, tmp_path / "m.jsonl").returncode == 0
    metrics, tags = (tmp_path / "m.jsonl").read_text(), sorted(os.listdir(tmp_path / "ck"))
    for steps in (10, 4):
        r = train(dsrun, clean_env, cfg, steps, tmp_path / "m.jsonl")
        assert r.returncode == 0, r.stderr
        assert (f"checkpoint {tmp_path / 'ck'}/global_step10 is at step 10 >= --steps {steps}: nothing to train"
                in r.stdout), r.stdout
        assert "done:" not in r.stdout and "saved checkpoint" not in r.stdout
        assert (tmp_path / "m.jsonl").read_text() == metrics  # nothing appended
        assert sorted(os.listdir(tmp_path / "ck")) == tags


def test_damaged_or_mismatched_checkpoints_are_clear_errors(dsrun, clean_env, tmp_path, corpus):
    cfg = config(tmp_path, corpus, tmp_path / "ck")
    assert train(dsrun, clean_env, cfg, 5, tmp_path / "m.jsonl").returncode == 0
    other = config(tmp_path, corpus, tmp_path / "ck", name="other.json", n_embd=64)
    r = train(dsrun, clean_env, other, 10, tmp_path / "m.jsonl")
    assert r.returncode == 1
    assert "model_states.dsckpt: parameter 0 is embed.wte [256,32] in the checkpoint but embed.wte [256,64] in this model" in r.stderr
    shard = tmp_path / "ck" / "global_step5" / "rank_00001_optim_states.dsckpt"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0x40
    shard.write_bytes(bytes(data))
    r = train(dsrun, clean_env, cfg, 10, tmp_path / "m.jsonl")
    assert r.returncode == 1
    assert f"{shard}: tensor exp_avg_sq: checksum mismatch (the file is corrupt)" in r.stderr
    shard.unlink()
    r = train(dsrun, clean_env, cfg, 10, tmp_path / "m.jsonl")
    assert r.returncode == 1 and f"{shard}: cannot open" in r.stderr
    r = train(dsrun, clean_env, cfg, 10, tmp_path / "m.jsonl", extra=("--resume", "never"))
    assert r.returncode == 0, r.stderr  # never: starts over (and saves over the damaged tag)


def test_max_restarts_resumes_a_killed_job_to_the_same_parameters(dsrun, clean_env, tmp_path, corpus):
    steps = 400  # long enough (seconds) that the job still runs when the test looks for rank 1 to kill
    straight = config(tmp_path, corpus, tmp_path / "a", name="a.json", n_layer=3, n_embd=64)
    assert train(dsrun, clean_env, straight, steps, tmp_path / "a.jsonl").returncode == 0
    job = config(tmp_path, corpus, tmp_path / "b", name="b.json", n_layer=3, n_embd=64)
    proc = subprocess.Popen([dsrun, "--num_gpus", "2", "--max_restarts", "2", "--master_port", str(free_port()),
                             DSWORKER, "--model", "gpt", "--config", job, "--steps", str(steps)],
                            env=dict(clean_env, DSRUN_LOCAL_SLOTS="2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    while not (tmp_path / "b" / "latest").exists():  # the first save (step 5) has happened
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(random.Random(11).random() * 0.5)
    victim = None
    for pid in subprocess.run(["pgrep", "-f", f"{DSWORKER} --model gpt --config {job}"], capture_output=True,
                              text=True).stdout.split():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if b"RANK=1" in f.read().split(b"\0"):
                    victim = int(pid)
        except OSError:  # a process pgrep saw has ended
            pass
    assert victim, "rank 1 not found"
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err.count("restart 1/2 after: rank 1 on localhost killed by SIGKILL") == 1, err
    assert "resumed from" in out + err
    for rank in range(2):
        name = f"global_step{steps}/rank_{rank:05}_optim_states.dsckpt"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def read_safetensors(path):
    """A small safetensors reader: {name: (shape, list of floats)} and the metadata."""
    import struct
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    meta = header.pop("__metadata__")
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32"
        begin, end = t["data_offsets"]
        raw = data[8 + length + begin:8 + length + end]
        tensors[name] = (t["shape"], list(struct.unpack(f"<{len(raw) // 4}f", raw)))
    return tensors, meta


def test_dsckpt_exports_weights_that_pytorch_evaluates_to_the_same_loss(dsrun, clean_env, tmp_path, corpus):
    torch = pytest.importorskip("torch")
    from torch_gpt import GPT, GPTConfig
    cfg = json.loads(open(config(tmp_path, corpus, tmp_path / "ck", stage=3)).read())
    cfg["data"].update(val_fraction=0.1)
    (tmp_path / "e.json").write_text(json.dumps(cfg))
    r = train(dsrun, clean_env, str(tmp_path / "e.json"), 15, tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    ours = [json.loads(line)["val_loss"] for line in open(tmp_path / "m.jsonl") if "val_loss" in line][-1]
    dsckpt = os.path.join(os.path.dirname(DSWORKER), "dsckpt")
    out = tmp_path / "w.safetensors"
    r = subprocess.run([dsckpt, "export", str(tmp_path / "ck"), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([dsckpt, "inspect", str(tmp_path / "ck")], capture_output=True, text=True)
    assert "global_step15: step 15 (15 applied), world size 2, ZeRO stage 3, fp32, 2 rank files, checksums ok" in r.stdout
    tensors, meta = read_safetensors(out)
    assert meta["step"] == "15" and "head.wte" not in tensors  # tied: stored once, as embed.wte
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, seq_len=32, vocab_size=256))
    state = {name: torch.tensor(values).reshape(shape) for name, (shape, values) in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(name.startswith("head.") for name in missing), missing
    data = TEXT.encode()
    val = data[len(data) - round(len(data) * 0.1):]
    windows = [val[i * 32:i * 32 + 33] for i in range((len(val) - 1) // 32)]
    per_rank = len(windows) // 2 // 4 * 4  # whole micro-batches of 4 on each of 2 ranks, rank r takes r, r+2, ...
    losses_ = []
    with torch.no_grad():
        for rank in range(2):
            mine = windows[rank::2][:per_rank]
            for b in range(0, per_rank, 4):
                batch = torch.tensor([list(w) for w in mine[b:b + 4]])
                losses_.append(model(batch[:, :-1], batch[:, 1:]).item())
    assert sum(losses_) / len(losses_) == pytest.approx(ours, rel=1e-5)


def test_dsckpt_exports_hugging_face_gpt2_that_transformers_evaluates_to_the_same_loss(dsrun, clean_env, tmp_path,
                                                                                     corpus):
    """`dsckpt export --format hf`: transformers' GPT2LMHeadModel (4.46, over Debian's torch, .venv-hf from
    scripts/test-venv.sh) loads the folder and reproduces dsworker's validation loss within 1e-5."""
    venv_python = os.path.join(ROOT, ".venv-hf", "bin", "python")
    assert os.path.exists(venv_python), "run scripts/test-venv.sh (transformers)"
    cfg = json.loads(open(config(tmp_path, corpus, tmp_path / "ck", stage=2)).read())
    cfg["data"].update(val_fraction=0.1)
    (tmp_path / "e.json").write_text(json.dumps(cfg))
    r = train(dsrun, clean_env, str(tmp_path / "e.json"), 12, tmp_path / "m.jsonl")
    assert r.returncode == 0, r.stderr
    ours = [json.loads(line)["val_loss"] for line in open(tmp_path / "m.jsonl") if "val_loss" in line][-1]
    dsckpt = os.path.join(os.path.dirname(DSWORKER), "dsckpt")
    out = tmp_path / "hf"
    r = subprocess.run([dsckpt, "export", str(tmp_path / "ck"), "-o", str(out), "--format", "hf"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    hf_config = json.loads((out / "config.json").read_text())
    assert (hf_config["model_type"], hf_config["n_layer"], hf_config["n_head"], hf_config["n_embd"]) == ("gpt2", 2, 2, 32)
    tensors, meta = read_safetensors(out / "model.safetensors")
    assert tensors["transformer.h.0.attn.c_attn.weight"][0] == [32, 96]  # Conv1D: [in, out]
    assert "lm_head.weight" not in tensors  # tied to transformer.wte.weight
    r = subprocess.run([venv_python, os.path.join(os.path.dirname(__file__), "hf_gpt2_eval.py"), str(out),
                        str(corpus), "32", "4", "2", "0.1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == pytest.approx(ours, rel=1e-5)
    # Logits: transformers on the export against the PyTorch twin of our plugin on our own export.
    assert subprocess.run([dsckpt, "export", str(tmp_path / "ck"), "-o", str(tmp_path / "ours.safetensors")],
                          capture_output=True).returncode == 0
    r = subprocess.run([venv_python, os.path.join(os.path.dirname(__file__), "hf_gpt2_logits.py"), str(out),
                        str(tmp_path / "ours.safetensors"), "2", "32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 1e-5
    # Another model's checkpoint is refused by name.
    mlp = json.load(open(os.path.join(ROOT, "configs", "mlp.json")))
    mlp["checkpoint"] = {"dir": str(tmp_path / "mlp_ck")}
    (tmp_path / "mlp.json").write_text(json.dumps(mlp))
    r = run([DSWORKER, "--model", "mlp", "--config", str(tmp_path / "mlp.json"), "--steps", "2"], clean_env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([dsckpt, "export", str(tmp_path / "mlp_ck"), "-o", str(tmp_path / "hf_mlp"), "--format", "hf"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "a checkpoint of the mlp model; --format hf exports the gpt plugin's" in r.stderr


def test_model_init_from_hugging_face_gpt2(dsrun, clean_env, tmp_path, corpus):
    """model.init_from: our own export comes back bit-identical (trained at ZeRO 2, imported at ZeRO 3 on 2
    ranks, at stage 0 on 1 rank and split over 2 tensor-parallel ranks, the vocabulary included), and a transformers-made GPT-2 (a longer context: its first seq_len
    positions) evaluates to transformers' loss within 1e-5; sizes that differ are named."""
    venv_python = os.path.join(ROOT, ".venv-hf", "bin", "python")
    assert os.path.exists(venv_python), "run scripts/test-venv.sh (transformers)"
    dsckpt = os.path.join(os.path.dirname(DSWORKER), "dsckpt")
    here = os.path.dirname(__file__)

    def frozen(name, stage, init_from, ck, tensor_parallel=1, **model):  # lr 0: one step leaves the weights as loaded
        cfg = json.loads(open(config(tmp_path, corpus, tmp_path / ck, stage=stage, name=name, **model)).read())
        cfg["optimizer"]["params"]["lr"] = 0.0
        del cfg["scheduler"]
        cfg["model"]["init_from"] = str(init_from)
        cfg["tensor_parallel"] = {"autotp_size": tensor_parallel}
        cfg["data"].update(val_fraction=0.1)
        (tmp_path / name).write_text(json.dumps(cfg))
        return str(tmp_path / name)

    r = train(dsrun, clean_env, config(tmp_path, corpus, tmp_path / "a", stage=2), 6, tmp_path / "a.jsonl")
    assert r.returncode == 0, r.stderr
    for args in (["-o", str(tmp_path / "hf"), "--format", "hf"], ["-o", str(tmp_path / "a.safetensors")]):
        assert subprocess.run([dsckpt, "export", str(tmp_path / "a"), *args], capture_output=True).returncode == 0
    for name, stage, ranks, tp in (("b", 3, 2, 1), ("c", 0, 1, 1), ("e", 1, 2, 2)):  # e: 2 tensor-parallel shares
        r = train(dsrun, clean_env, frozen(f"{name}.json", stage, tmp_path / "hf", name, tp), 1,
                  tmp_path / f"{name}.jsonl", ranks=ranks)
        assert r.returncode == 0, r.stderr
        assert f"initialised from {tmp_path / 'hf'}" in r.stderr
        out = tmp_path / f"{name}.safetensors"
        assert subprocess.run([dsckpt, "export", str(tmp_path / name), "-o", str(out)], capture_output=True).returncode == 0
        assert read_safetensors(out)[0] == read_safetensors(tmp_path / "a.safetensors")[0]  # bit-identical weights

    made = tmp_path / "made"
    r = subprocess.run([venv_python, os.path.join(here, "hf_gpt2_make.py"), str(made), "2", "2", "32", "64", "256"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = train(dsrun, clean_env, frozen("d.json", 2, made, "d"), 1, tmp_path / "d.jsonl")
    assert r.returncode == 0, r.stderr
    assert "its first 32 of 64 positions" in r.stderr
    ours = [json.loads(line)["val_loss"] for line in open(tmp_path / "d.jsonl") if "val_loss" in line][-1]
    r = subprocess.run([venv_python, os.path.join(here, "hf_gpt2_eval.py"), str(made), str(corpus), "32", "4", "2",
                        "0.1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == pytest.approx(ours, rel=1e-5)
    # Logits: transformers' model against the PyTorch twin of our plugin holding what dsworker imported.
    assert subprocess.run([dsckpt, "export", str(tmp_path / "d"), "-o", str(tmp_path / "d.safetensors")],
                          capture_output=True).returncode == 0
    r = subprocess.run([venv_python, os.path.join(here, "hf_gpt2_logits.py"), str(made), str(tmp_path / "d.safetensors"),
                        "2", "32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 1e-5

    r = train(dsrun, clean_env, frozen("e.json", 2, made, "e", n_embd=64), 1, tmp_path / "e.jsonl")
    assert r.returncode == 2
    assert "model.safetensors: transformer.wte.weight is [256,32], but the gpt plugin's embed.wte needs [256,64]" in r.stderr
