#!/usr/bin/python3
"""ZeRO benchmark: step time and per-rank memory of dsworker against a PyTorch peer, 2 CPU ranks, in one run.

Setup once (DeepSpeed on PyPI's current torch in <repo>/.venv-bench-torch, Debian's python3-torch for the DDP peer):
    bench/zero/setup.sh
Run (dsrun, dsworker and the mlp plugin must be built):
    bench/zero/run.py [--stages 0,1,2,3] [--reps 3] [--json results.json]

Every side trains the same model on 2 ranks of this machine, started by dsrun (DSRUN_LOCAL_SLOTS=2,
`dsrun --num_gpus 2 --master_port <free port>`), with one generated ds_config per stage:
  model   the mlp plugin's MLP: Linear(in, hidden) -> ReLU -> [Linear(hidden, hidden) -> ReLU] x (layers-1)
          -> Linear(hidden, classes) -> mean softmax cross-entropy; by default in 1024, hidden 4096, layers 4,
          classes 10: 54,583,306 parameters, fp32.
  config  train_micro_batch_size_per_gpu --micro-batch (32), gradient_accumulation_steps --gas (1), so a global
          batch of 64; optimizer Adam (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight_decay 0); gradient_clipping 1.0;
          no scheduler; zero_optimization: stage S, reduce_bucket_size and allgather_bucket_size --bucket (2e7
          elements, 76 MiB at fp32; DeepSpeed's default 5e8 would make the whole model one bucket, and stage 2
          would then save no gradient memory), at stages 2 and 3 also overlap_comm true, at stage 3 also
          stage3_prefetch_bucket_size --bucket, stage3_param_persistence_threshold 1e5 (the last Linear layer,
          40,970 elements, stays gathered) and stage3_max_live_parameters 1e9 (no cap here). Integers in the JSON.
          Both sides get the same file (DDP and FSDP ignore the zero_optimization block except its stage).
  steps   --warmup-steps (5) + --steps (20) per run; only the last --steps are timed.

Sides:
  ours           dsrun --num_gpus 2 build/worker/dsworker --model mlp --config CFG --steps N --metrics m.jsonl
                 Step time: dsworker's JSONL has per step "samples_per_sec" = global batch / the step's wall time
                 on rank 0 (steady clock around the whole optimizer step: micro-batch generation, forward with
                 the stage 3 parameter all-gathers, backward with the overlapped all-reduce (stage 0) or
                 reduce-scatter (stages 1-3), gradient norm and clipping, Adam, the stage 1-2 parameter
                 all-gather, the loss all-reduce), so the step time is exactly global_batch / samples_per_sec.
                 Also parsed from rank 0's output: "memory per rank at start: ..." (stderr) and "memory per rank
                 at peak: params, grads, optimizer state (model states), activations; peak RSS" (stdout): the
                 bytes dsworker itself holds, the peak one including its transient buckets and gathered layers;
                 and "sent per rank per step: allgather, allreduce, reduce_scatter" (bytes this rank sends).
                 BLAS threads: dsworker sets OpenBLAS to CPUs / LOCAL_SIZE = 1 thread per rank here (the benchmark
                 clears OMP_NUM_THREADS and OPENBLAS_* for it), and re-executes itself with OPENBLAS_CORETYPE set
                 when Debian's OpenBLAS misdetects the CPU.
  ours-prescott  the same with OPENBLAS_CORETYPE=Prescott forced: what that re-exec is worth (off by default;
                 --sides ours,peer,ours-prescott).
  ours-nvme      ours with ZeRO-Infinity (stages 1-3): zero_optimization.offload_optimizer {device nvme, nvme_path
                 --nvme-path (default: the run's directory), buffer_count --nvme-buffers (4)}, sub_group_size
                 --nvme-sub-group (2e6 elements) and the default aio block; dsworker's "NVMe offload per rank" line
                 (bytes, GB/s while in flight, seconds the update waited for I/O) is recorded. Off by default
                 (--sides ours,ours-nvme,peer); measure the disk first with `dsworker --aio_bench DIR`.
  peer-nvme      the peer with the same offload block (DeepSpeed's engine only; it treats nvme as cpu below
                 stage 3, and needs its async_io op: Debian libaio-dev, built on first use).
  ours-infinity  ours-nvme plus the parameters on NVMe (stage 3): zero_optimization.offload_param {device nvme,
                 the same nvme_path, buffer_count --nvme-param-buffers (5), max_in_cpu 0}; dsworker's "NVMe
                 parameter offload per rank" line is recorded too.
  peer-infinity  the peer with the same two blocks (DeepSpeed's engine only).
  peer           bench/zero/peer_train.py through the same dsrun, either
                   DeepSpeed's own engine (--peer deepspeed: <venv>/bin/python, deepspeed.initialize with the same
                   ds_config, DS_ACCELERATOR=cpu), or
                   PyTorch DDP over Gloo (--peer ddp: /usr/bin/python3, Debian's torch): stage 0 DDP + Adam,
                   stage 1 DDP + ZeroRedundancyOptimizer(Adam), stages 2/3 FSDP SHARD_GRAD_OP / FULL_SHARD.
                 --peer auto (default) first starts a tiny 2-rank deepspeed.initialize (the probe); if it fails,
                 the error is printed and recorded and the peer is DDP. The peer runs with torch.set_num_threads(1),
                 OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 (torch.set_num_threads does not reach Debian's
                 pthread OpenBLAS, which would otherwise run 2 threads per rank on 2 cores), and with the same
                 OpenBLAS core fix as dsworker (--peer-coretype auto). Step time: perf_counter around the same
                 work on rank 0, from zero_grad to after the loss all-reduce.

Memory: while a run goes, the rank processes (found in /proc by the run's directory in their command line and a
RANK variable in their environment) are polled every 50 ms for VmHWM, the peak resident set size (dsworker's
re-exec of itself starts a new address space, so for dsworker it is the peak of the re-executed image, which
trains). Also recorded: the OPENBLAS_CORETYPE each rank process actually ran with.
Theory: fp32 + Adam keeps 16 bytes per parameter (Ψ): parameters 4Ψ + gradients 4Ψ + Adam's two moments 8Ψ; per
rank with N ranks: stage 0 16Ψ, stage 1 8Ψ + 8Ψ/N, stage 2 4Ψ + 12Ψ/N, stage 3 16Ψ/N (dsworker's "at start"
figures). Transient buffers come on top of that at the peak: at stages 2 and 3 up to two gradient buckets of at
most reduce_bucket_size elements (the one backward fills and the one being reduce-scattered, overlap_comm; here one
4096x4096 layer each, 64 MiB), and at stage 3 the gathered parameters of the layer in use and the prefetched ones
(here up to 2 x 64 MiB, plus what dsworker's buffer pool keeps); the summary prints the model states at start and at
the peak next to the formula.

A stage that dsworker refuses (exit 2, "... is not implemented yet") prints "not implemented" and is not tried
again; a stage the peer cannot run (peer_train.py exits 3, "peer unavailable: ...") prints "not available" with the
reason. Neither fails the benchmark. The repetitions are interleaved (per repetition: every stage, every side), so
that background load hits all alike. Results: per stage, the median over runs of each run's median step time, the
min-max of the run medians and of all timed steps, the ratio of medians ours/peer (below 1: dsworker is faster),
the peak RSS of each rank (median over runs) and the memory each side reports. --json writes every sample.
Cleanup: every process of a run (found by its directory in /proc) and the temporary directory are removed at the
end, on an error, on Ctrl-C and on SIGTERM. Every run has a time limit (--timeout).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from common import alive, binary_id, kill_group, kill_pids, log  # noqa: E402  (bench/common.py)
from throwaway_sshd import free_port  # noqa: E402

PEER = os.path.join(HERE, "peer_train.py")
RANKS = 2
POLL_S = 0.05
ALL_SIDES = ("ours", "peer", "ours-prescott", "ours-nvme", "peer-nvme", "ours-infinity", "peer-infinity")
NVME = ("ours-nvme", "peer-nvme", "ours-infinity", "peer-infinity")
INFINITY = ("ours-infinity", "peer-infinity")


def is_peer(side):
    return side.startswith("peer")
OURS = ("ours", "ours-prescott", "ours-nvme", "ours-infinity")
MIB = 1048576.0


# ---------------------------------------------------------------------------------------------------------------
# /proc helpers


def scan(path):
    """Live processes with `path` in their command line: [(pid, argv)]."""
    needle = path.encode()
    found = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if needle in cmd and alive(int(d)):
            found.append((int(d), [a.decode(errors="replace") for a in cmd.split(b"\0") if a]))
    return found


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return None
    env = {}
    for it in items:
        k, sep, v = it.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class RankWatcher(threading.Thread):
    """Polls the rank processes of one run (their argv holds `rundir`, their environment a RANK) for VmHWM."""

    def __init__(self, rundir):
        super().__init__(daemon=True)
        self.rundir = rundir
        self.stop = threading.Event()
        self.ranks = {}  # pid -> {"rank", "hwm_kib", "exe", "coretype"}

    def run(self):
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(POLL_S)
        self.poll()

    def poll(self):
        if len(self.ranks) < RANKS:
            for pid, argv in scan(self.rundir):
                if pid in self.ranks or os.path.basename(argv[0]) == "dsrun":
                    continue
                env = environ(pid)
                if env is None or "RANK" not in env:
                    continue
                self.ranks[pid] = {"rank": int(env["RANK"]), "hwm_kib": 0, "exe": os.path.basename(argv[0]),
                                   "coretype": env.get("OPENBLAS_CORETYPE")}
        for pid, r in self.ranks.items():
            hwm = status_kib(pid, "VmHWM")
            if hwm is not None:
                r["hwm_kib"] = max(r["hwm_kib"], hwm)
                env = environ(pid)  # dsworker sets OPENBLAS_CORETYPE when it re-executes itself
                if env is not None:
                    r["coretype"] = env.get("OPENBLAS_CORETYPE")


# ---------------------------------------------------------------------------------------------------------------
# The benchmark


def theory_bytes(stage, psi, n=RANKS):
    return {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]


def count_params(in_f, hidden, layers, classes):
    n = in_f * hidden + hidden
    n += (layers - 1) * (hidden * hidden + hidden)
    return n + hidden * classes + classes


SIZE = r"([\d.]+) (B|KiB|MiB|GiB)"
# dsworker, rank 0: "memory per rank at start: ..." (stderr, prefixed "dsworker: ") and "memory per rank at peak: ...;
# peak RSS ..." (stdout); both prefixed "[rank 0] " by dsrun.
MEM_RE = re.compile(rf"memory per rank at (start|peak): params {SIZE}(?: \+ [\d.]+ \w+ on NVMe)?, grads {SIZE}, "
                    rf"optimizer state {SIZE}"
                    rf"(?: \+ [\d.]+ \w+ on NVMe)? \(model states {SIZE}\), activations {SIZE}(?:; peak RSS {SIZE})?")
NVME_RE = re.compile(r"NVMe offload per rank: (.*)$")
PARAM_NVME_RE = re.compile(r"NVMe parameter offload per rank: (.*)$")
MEM_KEYS = ("params", "grads", "optimizer_state", "model_states", "activations", "peak_rss")
SENT_RE = re.compile(r"sent per rank per step: (.*)$")
SENT_ITEM_RE = re.compile(rf"(\w+) {SIZE}")
RANK_PREFIX_RE = re.compile(r"^\[rank (\d+)\] ")
UNIT_MIB = {"B": 1 / MIB, "KiB": 1 / 1024.0, "MiB": 1.0, "GiB": 1024.0}
PARAMS_RE = re.compile(r"dsworker: model \S+: (\d+) parameters")


class Bench:
    def __init__(self, args, root):
        self.args = args
        self.root = root
        self.samples = []
        self.counter = 0
        self.refused = {}      # (side, stage) -> reason: not implemented / not available
        self.peer_impl = None  # "deepspeed" or "ddp"
        self.peer_probe = None
        self.current = None    # the running dsrun, for cleanup

    # ----- environment

    def base_env(self):
        drop = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
                "DSRUN_LOCAL_SLOTS", "CUDA_VISIBLE_DEVICES")
        env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("DS_", "PDSH_"))}
        env["DSRUN_LOCAL_SLOTS"] = str(RANKS)
        env["DS_ACCELERATOR"] = "cpu"
        return env

    def env_for(self, side):
        env = self.base_env()
        if side == "ours-prescott":
            env["OPENBLAS_CORETYPE"] = "Prescott"
        if is_peer(side):
            env["OMP_NUM_THREADS"] = "1"
            env["OPENBLAS_NUM_THREADS"] = "1"
            if self.args.peer_coretype not in ("auto", "off"):
                env["OPENBLAS_CORETYPE"] = self.args.peer_coretype
        return env

    def config(self, stage, probe=False):
        a = self.args
        model = {"in_features": a.in_features, "hidden": a.hidden, "layers": a.layers, "classes": a.classes,
                 "num_samples": a.micro_batch * a.gas * RANKS * (a.warmup_steps + a.steps)}
        if probe:
            model = {"in_features": 32, "hidden": 64, "layers": 2, "classes": 10, "num_samples": 64}
        return {
            "train_micro_batch_size_per_gpu": 4 if probe else a.micro_batch,
            "gradient_accumulation_steps": 1 if probe else a.gas,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8,
                                                     "weight_decay": 0}},
            "gradient_clipping": 1.0,
            "steps_per_print": 1000000,
            "zero_optimization": self.zero_config(stage, probe),
            "model": model,
        }

    def zero_config(self, stage, probe=False):
        """The zero_optimization block: the stage, and buckets small enough that stages 2-3 shard gradients."""
        z = {"stage": stage}
        if probe:
            return z
        bucket = int(self.args.bucket)
        z["reduce_bucket_size"] = bucket
        z["allgather_bucket_size"] = bucket
        if stage >= 2:
            z["overlap_comm"] = True
        if stage == 3:
            z["stage3_prefetch_bucket_size"] = bucket
            z["stage3_param_persistence_threshold"] = 100000
            z["stage3_max_live_parameters"] = 1000000000
        return z

    def argv(self, side, cfg_path, metrics, steps, port, impl=None):
        a = self.args
        head = [a.dsrun, "--num_gpus", str(RANKS), "--master_port", str(port)]
        if side in OURS:
            return head + [a.dsworker, "--model", a.model, "--config", cfg_path, "--steps", str(steps),
                           "--metrics", metrics]
        impl = impl or self.peer_impl
        py = os.path.join(a.venv, "bin", "python") if impl == "deepspeed" else a.python
        return head + [py, PEER, "--impl", impl, "--config", cfg_path, "--steps", str(steps), "--metrics", metrics,
                       "--threads", "1", "--foreach", a.peer_foreach,
                       "--blas-fix", "auto" if a.peer_coretype == "auto" else "off"]

    # ----- one run

    def launch(self, rundir, argv, env, limit):
        """Runs dsrun; returns (rc or None on timeout, output text, wall s, watcher ranks)."""
        logpath = os.path.join(rundir, "output.log")
        watcher = RankWatcher(rundir)
        with open(logpath, "wb") as logf:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    cwd=rundir, start_new_session=True)
            self.current = proc
            watcher.start()
            try:
                rc = proc.wait(limit)
            except subprocess.TimeoutExpired:
                rc = None
                kill_group(proc)
            wall = time.monotonic() - t0
            watcher.stop.set()
            watcher.join(5)
            self.current = None
        left = scan(rundir)
        kill_pids(p for p, _ in left)
        with open(logpath, "rb") as f:
            text = f.read().decode(errors="replace")
        return rc, text, wall, watcher.ranks, left

    def probe_deepspeed(self):
        """A tiny 2-rank deepspeed.initialize + 2 steps; returns (ok, reason)."""
        rundir = os.path.join(self.root, "runs", "0000-deepspeed-probe")
        os.makedirs(rundir)
        cfg_path = os.path.join(rundir, "ds_config.json")
        with open(cfg_path, "w") as f:
            json.dump(self.config(0, probe=True), f, indent=1)
        argv = self.argv("peer", cfg_path, os.path.join(rundir, "m.jsonl"), 2, free_port(), impl="deepspeed")
        log("peer: probing DeepSpeed's engine (tiny model, 2 ranks, 2 steps): " + " ".join(map(shlex.quote, argv)))
        rc, text, wall, _, _ = self.launch(rundir, argv, self.env_for("peer"), 300)
        if rc == 0:
            return True, None, text
        m = re.search(r"peer unavailable: (.*)", text)
        if m:
            reason = m.group(1).strip()
        elif rc is None:
            reason = "timed out after 300 s"
        else:
            errs = [l for l in text.splitlines() if re.search(r"Error|error:", l)]
            reason = (errs[-1] if errs else text.strip().splitlines()[-1] if text.strip() else f"exit {rc}")
            reason = re.sub(r"^\[rank \d+\] ", "", reason)
        return False, reason, text

    def run_once(self, side, stage, rep):
        a = self.args
        self.counter += 1
        rundir = os.path.join(self.root, "runs", f"{self.counter:04d}-s{stage}-{side}")
        os.makedirs(rundir)
        cfg = self.config(stage)
        if side in NVME:
            cfg["zero_optimization"]["sub_group_size"] = int(a.nvme_sub_group)
            cfg["zero_optimization"]["offload_optimizer"] = {"device": "nvme", "nvme_path": a.nvme_path or rundir,
                                                             "buffer_count": a.nvme_buffers}
        if side in INFINITY:
            cfg["zero_optimization"]["offload_param"] = {"device": "nvme", "nvme_path": a.nvme_path or rundir,
                                                         "buffer_count": a.nvme_param_buffers, "max_in_cpu": 0}
        cfg_path = os.path.join(rundir, "ds_config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=1)
        metrics = os.path.join(rundir, "m.jsonl")
        steps = a.warmup_steps + a.steps
        argv = self.argv(side, cfg_path, metrics, steps, free_port())
        sample = {"side": side, "stage": stage, "rep": rep, "ok": False, "status": "failed", "errors": [],
                  "argv": argv, "loadavg": open("/proc/loadavg").read().split()[:3]}
        if is_peer(side):
            sample["peer_impl"] = self.peer_impl
        env = self.env_for(side)
        sample["env"] = {k: env[k] for k in ("DSRUN_LOCAL_SLOTS", "DS_ACCELERATOR", "OMP_NUM_THREADS",
                                             "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE") if k in env}
        rc, text, wall, ranks, left = self.launch(rundir, argv, env, a.timeout)
        sample["rc"] = rc
        sample["wall_s"] = wall
        sample["ranks"] = {str(r["rank"]): {"pid": pid, "exe": r["exe"], "peak_rss_mib": r["hwm_kib"] / 1024.0,
                                            "openblas_coretype": r["coretype"]}
                           for pid, r in sorted(ranks.items(), key=lambda kv: kv[1]["rank"])}
        if left:
            sample["errors"].append(f"{len(left)} process(es) left after dsrun exited (killed): "
                                    + "; ".join(f"{p} {' '.join(c)[:120]}" for p, c in left[:3]))
        lines = [RANK_PREFIX_RE.sub("", l) for l in text.splitlines()]
        rank0 = [RANK_PREFIX_RE.sub("", l) for l in text.splitlines()
                 if not RANK_PREFIX_RE.match(l) or RANK_PREFIX_RE.match(l).group(1) == "0"]
        if not is_peer(side) and rc == 2 and "is not implemented yet" in text:
            sample["status"] = "not implemented"
            reason = next((l for l in lines if "is not implemented yet" in l), "").strip()
            sample["reason"] = re.sub(r"^dsworker: error: \S*ds_config\.json: ", "", reason)
            self.refused[(side, stage)] = sample["reason"]
        elif is_peer(side) and rc not in (0, None) and "peer unavailable:" in text:
            sample["status"] = "not available"
            sample["reason"] = next(l for l in lines if "peer unavailable:" in l).split("peer unavailable:", 1)[1]
            sample["reason"] = sample["reason"].strip()
            self.refused[(side, stage)] = sample["reason"]
        elif rc is None:
            sample["errors"].append(f"still running after {a.timeout} s: killed")
        elif rc != 0:
            sample["errors"].append(f"dsrun exit code {rc}")
        else:
            self.parse_ok_run(sample, rank0, metrics, steps)
        if not sample["ok"] and sample["status"] == "failed":
            sample["log_tail"] = "\n".join(text.splitlines()[-25:])
        self.samples.append(sample)
        self.report_sample(sample)
        return sample

    def parse_ok_run(self, sample, lines, metrics, steps):
        a = self.args
        global_batch = a.micro_batch * a.gas * RANKS
        rows = []
        try:
            with open(metrics) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            sample["errors"].append(f"metrics {metrics}: {e}")
            return
        if len(rows) != steps:
            sample["errors"].append(f"metrics has {len(rows)} steps, expected {steps}")
            return
        if is_peer(sample["side"]):
            secs = [r["seconds"] for r in rows]
        else:  # dsworker: samples_per_sec = global batch / the step's seconds on rank 0
            secs = [global_batch / r["samples_per_sec"] for r in rows]
        sample["step_ms_all"] = [s * 1000 for s in secs]
        sample["step_ms"] = sample["step_ms_all"][a.warmup_steps:]
        sample["median_ms"] = statistics.median(sample["step_ms"])
        sample["loss_first_last"] = [rows[0]["loss"], rows[-1]["loss"]]
        for l in lines:
            m = MEM_RE.search(l)
            if m:
                v = {k: float(m.group(2 + 2 * i)) * UNIT_MIB[m.group(3 + 2 * i)]
                     for i, k in enumerate(MEM_KEYS) if m.group(2 + 2 * i) is not None}
                sample["reported_mib" if m.group(1) == "peak" else "reported_start_mib"] = v
            m = SENT_RE.search(l)
            if m:
                sample["sent_mib"] = {k: float(n) * UNIT_MIB[u] for k, n, u in SENT_ITEM_RE.findall(m.group(1))}
            m = PARAMS_RE.search(l)
            if m:
                sample["num_parameters"] = int(m.group(1))
            m = NVME_RE.search(l)
            if m:
                sample["nvme_line"] = m.group(1)
            m = PARAM_NVME_RE.search(l)
            if m:
                sample["param_nvme_line"] = m.group(1)
            if l.startswith("PEER_INFO "):
                info = json.loads(l[len("PEER_INFO "):])
                sample["peer_info"] = info
                sample["num_parameters"] = info.get("num_parameters")
                rep = {"params": info["param_bytes"] / MIB, "grads": info["grad_bytes"] / MIB,
                       "optimizer_state": info["optimizer_state_bytes"] / MIB}
                rep["model_states"] = sum(rep.values())
                sample["reported_mib"] = rep
        if not is_peer(sample["side"]) and "reported_mib" not in sample:
            sample["warnings"] = ["no \"memory per rank at peak\" line from rank 0"]
        if len(sample["ranks"]) != RANKS or any(r["peak_rss_mib"] <= 0 for r in sample["ranks"].values()):
            # A run of a few milliseconds can end between two polls: no memory figure, but the times stand.
            sample.setdefault("warnings", []).append(
                f"found {len(sample['ranks'])} of {RANKS} rank processes in /proc: no peak RSS")
        sample["ok"] = True
        sample["status"] = "ok"

    def report_sample(self, s):
        head = f"  rep {s['rep'] + 1} stage {s['stage']} {s['side']:13}"
        if s["status"] == "ok":
            rss = " / ".join(f"{r['peak_rss_mib']:.0f}" for _, r in sorted(s["ranks"].items())) or "-"
            cores = ",".join(sorted({str(r["openblas_coretype"]) for r in s["ranks"].values()}))
            ms = s.get("reported_mib", {}).get("model_states")
            log(f"{head} step median {s['median_ms']:.0f} ms (min {min(s['step_ms']):.0f}, max "
                f"{max(s['step_ms']):.0f}), peak RSS per rank {rss} MiB"
                + (f" (model states {ms:.0f} MiB)" if ms else "") + f", OPENBLAS_CORETYPE {cores}, "
                f"run {s['wall_s']:.1f} s, loss {s['loss_first_last'][0]:.4f} -> {s['loss_first_last'][1]:.4f}")
        elif s["status"] in ("not implemented", "not available"):
            log(f"{head} {s['status']}: {s['reason']}")
            for w in s.get("warnings", []):
                log(f"    warning: {w}")
        else:
            log(f"{head} FAILED: {' | '.join(s['errors'])}")
            if s.get("log_tail"):
                log("    output (tail):\n" + "\n".join("      " + l for l in s["log_tail"].splitlines()))

    # ----- the whole run

    def choose_peer(self):
        a = self.args
        if a.peer == "ddp":
            self.peer_impl = "ddp"
            return True
        ok, reason, text = self.probe_deepspeed()
        self.peer_probe = {"ok": ok, "reason": reason, "output_tail": "\n".join(text.splitlines()[-30:])}
        if ok:
            self.peer_impl = "deepspeed"
            log("peer: DeepSpeed's engine runs here: the peer is DeepSpeed")
            return True
        log(f"peer: DeepSpeed's engine does not run here: {reason}")
        if a.peer == "deepspeed":
            return False
        self.peer_impl = "ddp"
        log("peer: using PyTorch DDP over Gloo instead (--peer auto)")
        return True

    def run(self):
        a = self.args
        for rep in range(a.reps):
            for stage in a.stages:
                for side in a.sides:
                    if (side, stage) in self.refused:
                        continue
                    self.run_once(side, stage, rep)


# ---------------------------------------------------------------------------------------------------------------
# Reporting


def fmt_ratio(a, b):
    return f"{a / b:.2f}x"


def fmt_mib(v):
    return f"{v:.0f}" if v >= 10 or v == 0 else f"{v:.1f}" if v >= 0.1 else f"{v * MIB:.0f} B"


def fmt_reported(rep):
    """params P, grads G, optimizer state O (model states M), activations A; peak RSS R MiB"""
    s = ", ".join(f"{k.replace('_', ' ')} {fmt_mib(rep[k])}" for k in ("params", "grads", "optimizer_state")
                  if k in rep)
    if "model_states" in rep:
        s += f" (model states {fmt_mib(rep['model_states'])})"
    if "activations" in rep:
        s += f", activations {fmt_mib(rep['activations'])}"
    if "peak_rss" in rep:
        s += f"; peak RSS {fmt_mib(rep['peak_rss'])}"
    return s + " MiB"


def summary(bench, psi):
    a = bench.args
    out = []
    for stage in a.stages:
        lines = [f"stage {stage}: model states in theory (fp32 + Adam) {theory_bytes(stage, psi) / MIB:.0f} MiB per "
                 f"rank ({ {0: '16Ψ', 1: '8Ψ + 8Ψ/2', 2: '4Ψ + 12Ψ/2', 3: '16Ψ/2'}[stage] })"]
        lines.append(f"  {'side':14} {'step median':>12} {'run medians':>16} {'all steps':>16} "
                     f"{'peak RSS rank 0 / 1':>21}  reported by the side (per rank)")
        med = {}
        rss = {}
        for side in a.sides:
            mine = [s for s in bench.samples if s["side"] == side and s["stage"] == stage]
            ok = [s for s in mine if s["ok"]]
            name = side if not is_peer(side) else f"{side} ({bench.peer_impl})"
            if (side, stage) in bench.refused:
                what = "not implemented" if not is_peer(side) else "not available"
                lines.append(f"  {name:14} {what}: {bench.refused[(side, stage)]}")
                continue
            if not ok:
                lines.append(f"  {name:14} no successful run ({len(mine)} failed)")
                continue
            run_meds = [s["median_ms"] for s in ok]
            steps = [x for s in ok for x in s["step_ms"]]
            med[side] = statistics.median(run_meds)
            r = []
            for k in range(RANKS):
                vals = [s["ranks"][str(k)]["peak_rss_mib"] for s in ok
                        if str(k) in s["ranks"] and s["ranks"][str(k)]["peak_rss_mib"] > 0]
                r.append(statistics.median(vals) if vals else float("nan"))
            rss[side] = max(r)
            rep = ok[-1].get("reported_mib", {})
            rep_s = fmt_reported(rep) if rep else "-"
            if not is_peer(side) and rep:
                rep_s = "at peak: " + rep_s
            r_s = [f"{x:.0f}" if x == x else "-" for x in r]
            lines.append(f"  {name:14} {med[side]:>9.0f} ms {min(run_meds):>7.0f}-{max(run_meds):<5.0f} ms "
                         f"{min(steps):>7.0f}-{max(steps):<5.0f} ms {r_s[0]:>9} / {r_s[1]:<6} MiB  {rep_s}"
                         + (f"  [{len(ok)}/{len(mine)} runs ok]" if len(ok) != len(mine) else ""))
            pad = " " * 84
            start = ok[-1].get("reported_start_mib")
            if start:
                lines.append(f"{pad}at start: {fmt_reported(start)}")
            ms = [x.get("model_states") for x in (start or {}, rep) if x.get("model_states")]
            if ms:
                lines.append(f"{pad}model states / theory: " + ", ".join(
                    f"{w} {fmt_ratio(v * MIB, theory_bytes(stage, psi))}"
                    for w, v in zip(("at start", "at peak") if start else ("reported",), ms)))
            sent = ok[-1].get("sent_mib")
            if sent:
                lines.append(f"{pad}sent per rank per step: "
                             + ", ".join(f"{k} {fmt_mib(v)}" for k, v in sent.items()) + " MiB")
        if "ours" in med and "peer" in med:
            lines.append(f"  ratio ours/peer: step time {fmt_ratio(med['ours'], med['peer'])}, peak RSS (larger rank) "
                         + (fmt_ratio(rss['ours'], rss['peer']) if rss['ours'] == rss['ours'] and
                            rss['peer'] == rss['peer'] else "-"))
        if "ours" in med and "ours-nvme" in med:
            lines.append(f"  ZeRO-Infinity (optimizer state on NVMe): step time {fmt_ratio(med['ours-nvme'], med['ours'])} "
                         f"of in memory, peak RSS (larger rank) {fmt_ratio(rss['ours-nvme'], rss['ours'])}")
            io = next((s.get("nvme_line") for s in reversed(bench.samples)
                       if s["side"] == "ours-nvme" and s["stage"] == stage and s.get("nvme_line")), None)
            if io:
                lines.append(f"    last run's rank 0: {io}")
        if "ours-nvme" in med and "peer-nvme" in med:
            lines.append(f"  ratio ours-nvme/peer-nvme: step time {fmt_ratio(med['ours-nvme'], med['peer-nvme'])}, "
                         f"peak RSS (larger rank) {fmt_ratio(rss['ours-nvme'], rss['peer-nvme'])}")
        if "ours" in med and "ours-infinity" in med:
            lines.append(f"  ZeRO-Infinity (parameters and optimizer state on NVMe): step time "
                         f"{fmt_ratio(med['ours-infinity'], med['ours'])} of in memory, peak RSS (larger rank) "
                         f"{fmt_ratio(rss['ours-infinity'], rss['ours'])}")
            for key in ("nvme_line", "param_nvme_line"):
                io = next((s.get(key) for s in reversed(bench.samples)
                           if s["side"] == "ours-infinity" and s["stage"] == stage and s.get(key)), None)
                if io:
                    lines.append(f"    last run's rank 0 ({'parameters' if key == 'param_nvme_line' else 'optimizer'}): {io}")
        if "ours-infinity" in med and "peer-infinity" in med:
            lines.append(f"  ratio ours-infinity/peer-infinity: step time "
                         f"{fmt_ratio(med['ours-infinity'], med['peer-infinity'])}, peak RSS (larger rank) "
                         f"{fmt_ratio(rss['ours-infinity'], rss['peer-infinity'])}")
        if "ours" in med and "ours-prescott" in med:
            lines.append(f"  OPENBLAS_CORETYPE=Prescott forced: step time "
                         f"{fmt_ratio(med['ours-prescott'], med['ours'])} of the default (the re-exec's core)")
        out.append("\n".join(lines))
    return "\n\n".join(out)



def versions(args):
    def cmd(argv):
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except OSError:
            return "?"
        try:
            out, err = proc.communicate(timeout=60)
            return ((out or err).strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            kill_group(proc, 1.0)
            return "?"

    venv_py = os.path.join(args.venv, "bin", "python")
    v = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "kernel": platform.release(),
        "dsrun": cmd([args.dsrun, "--version"]),
        "commit": cmd(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        "python": cmd([args.python, "--version"]),
        "torch": cmd([args.python, "-c", "import torch; print(torch.__version__)"]),
        "openblas": cmd(["dpkg-query", "-W", "-f=${Version}", "libopenblas0-pthread"]),
        "python3-torch": cmd(["dpkg-query", "-W", "-f=${Version}", "python3-torch"]),
        "worktree_changes": cmd(["sh", "-c", f"git -C {shlex.quote(REPO)} status --porcelain --untracked-files=no "
                                             "| wc -l"]),
        "dsworker_binary": binary_id(args.dsworker),
    }
    if os.access(venv_py, os.X_OK):
        v["deepspeed"] = cmd([venv_py, "-c", "import importlib.metadata as m; print(m.version('deepspeed'))"])
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default="0", help="comma-separated ZeRO stages, e.g. 0,1,2,3 (default 0)")
    p.add_argument("--sides", default="ours,peer",
                   help="comma-separated subset of " + ",".join(ALL_SIDES))
    p.add_argument("--nvme-path", help="ours-nvme: the swap files' directory (default: each run's directory)")
    p.add_argument("--nvme-buffers", type=int, default=4, help="ours-nvme: offload_optimizer.buffer_count (default 4)")
    p.add_argument("--nvme-param-buffers", type=int, default=5,
                   help="ours-infinity: offload_param.buffer_count (default 5)")
    p.add_argument("--nvme-sub-group", type=float, default=2e6, help="ours-nvme: sub_group_size, elements (default 2e6)")
    p.add_argument("--reps", type=int, default=3, help="whole runs per side and stage (default 3)")
    p.add_argument("--warmup-steps", type=int, default=5, help="untimed steps at the start of each run (default 5)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    p.add_argument("--micro-batch", type=int, default=32, help="train_micro_batch_size_per_gpu (default 32)")
    p.add_argument("--gas", type=int, default=1, help="gradient_accumulation_steps (default 1)")
    p.add_argument("--in-features", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--bucket", type=float, default=2e7,
                   help="reduce/allgather bucket size and stage3_prefetch_bucket_size, elements (default 2e7)")
    p.add_argument("--peer", choices=("auto", "deepspeed", "ddp"), default="auto",
                   help="auto: DeepSpeed's engine if its probe runs, else DDP (default)")
    p.add_argument("--peer-coretype", default="auto",
                   help="auto: the peer fixes Debian's OpenBLAS core as dsworker does (default); off: leave it; "
                        "NAME: OPENBLAS_CORETYPE=NAME")
    p.add_argument("--peer-foreach", choices=("default", "on", "off"), default="default",
                   help="torch.optim.Adam foreach flag for the DDP peer (default: torch's default)")
    p.add_argument("--timeout", type=int, default=600, help="time limit of one run, s (default 600)")
    p.add_argument("--dsrun", default=os.path.join(REPO, "build", "cli", "dsrun"))
    p.add_argument("--dsworker", default=os.path.join(REPO, "build", "worker", "dsworker"))
    p.add_argument("--model", default="mlp", help="dsworker --model (default mlp)")
    p.add_argument("--venv", default=os.path.join(REPO, ".venv-bench-torch"),
                   help="venv with DeepSpeed (bench/zero/setup.sh; default <repo>/.venv-bench-torch)")
    p.add_argument("--python", default="/usr/bin/python3", help="python with Debian's torch for the DDP peer")
    p.add_argument("--json", metavar="PATH", help="write every sample and the environment to PATH")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (configs, logs, metrics)")
    args = p.parse_args()
    try:
        args.stages = [int(s) for s in args.stages.split(",") if s]
    except ValueError:
        p.error("--stages takes comma-separated integers 0-3")
    if not args.stages or any(s not in (0, 1, 2, 3) for s in args.stages):
        p.error("--stages takes comma-separated integers 0-3")
    args.sides = [s for s in args.sides.split(",") if s]
    if not args.sides or set(args.sides) - set(ALL_SIDES):
        p.error(f"--sides takes a comma-separated subset of {','.join(ALL_SIDES)}")
    if args.reps < 1 or args.steps < 1 or args.warmup_steps < 0 or args.micro_batch < 1 or args.gas < 1 \
            or args.bucket < 1:
        p.error("--reps, --steps, --micro-batch, --gas, --bucket must be >= 1 and --warmup-steps >= 0")
    args.dsrun = os.path.abspath(args.dsrun)
    args.dsworker = os.path.abspath(args.dsworker)
    for path in (args.dsrun, args.dsworker):
        if not os.access(path, os.X_OK):
            p.error(f"{path} is not an executable: build it first (scripts/build.sh)")
    if any(is_peer(x) for x in args.sides):
        if args.peer != "ddp" and not os.access(os.path.join(args.venv, "bin", "python"), os.X_OK):
            if args.peer == "deepspeed":
                p.error(f"no DeepSpeed in {args.venv}: run bench/launch/setup.sh")
            log(f"peer: no venv with DeepSpeed at {args.venv} (bench/launch/setup.sh): the peer is DDP")
            args.peer = "ddp"
        if not os.access(args.python, os.X_OK):
            p.error(f"{args.python} is not an executable")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    root = tempfile.mkdtemp(prefix="dsrun-bench-zero-")
    bench = Bench(args, root)
    psi = count_params(args.in_features, args.hidden, args.layers, args.classes)
    rc = 0
    try:
        info = versions(args)
        info["loadavg_before"] = open("/proc/loadavg").read().split()[:3]
        info["command"] = " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
        info["num_parameters"] = psi
        log(f"bench/zero: {info['date']}, {info['cpus']} CPUs ({info['cpu']}), kernel {info['kernel']}, load "
            f"{' '.join(info['loadavg_before'])}")
        log(f"  {info['dsrun']} (repo at {info['commit']}, {info['worktree_changes']} changed tracked file(s); "
            f"dsworker built {info['dsworker_binary']['mtime']}); {info['python']}, torch {info['torch']} (Debian "
            f"python3-torch {info['python3-torch']}), OpenBLAS {info['openblas']}"
            + (f"; deepspeed {info['deepspeed']}" if "deepspeed" in info else ""))
        gb = args.micro_batch * args.gas * RANKS
        log(f"  model: mlp in {args.in_features}, hidden {args.hidden}, layers {args.layers}, classes {args.classes}: "
            f"{psi:,} parameters (fp32); {RANKS} ranks, global batch {gb} (micro {args.micro_batch} x accumulation "
            f"{args.gas} x {RANKS}); Adam; {args.warmup_steps} warm-up + {args.steps} timed steps per run")
        os.makedirs(os.path.join(root, "runs"))
        if any(is_peer(x) for x in args.sides) and not bench.choose_peer():
            raise SystemExit(1)
        info["peer_impl"] = bench.peer_impl
        info["peer_probe"] = bench.peer_probe
        bench.run()
        info["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
        info["dsworker_binary_after"] = binary_id(args.dsworker)
        if info["dsworker_binary_after"] != info["dsworker_binary"]:
            log(f"warning: {args.dsworker} changed during the benchmark (rebuilt?): {info['dsworker_binary']} -> "
                f"{info['dsworker_binary_after']}")
        peer_info = next((s["peer_info"] for s in bench.samples if s.get("peer_info")), None)
        print()
        print(f"bench/zero results, {info['date']}: {args.reps} runs per side and stage, {args.warmup_steps} warm-up + "
              f"{args.steps} timed steps each; {info['cpus']} CPUs, load {' '.join(info['loadavg_before'])} -> "
              f"{' '.join(info['loadavg_after'])}")
        print(f"model: mlp {args.in_features}-{args.hidden}x{args.layers}-{args.classes}, {psi:,} parameters (Ψ), "
              f"fp32, Adam, gradient_clipping 1.0; {RANKS} CPU ranks, global batch {gb} "
              f"(micro {args.micro_batch} x GAS {args.gas} x {RANKS})")
        print(f"ours: {info['dsrun']} + dsworker --model {args.model}, 1 OpenBLAS thread per rank")
        for stage in args.stages:
            print(f"stage {stage} zero_optimization (both sides): {json.dumps(bench.zero_config(stage))}")
        if any(is_peer(x) for x in args.sides):
            if bench.peer_probe and not bench.peer_probe["ok"]:
                print(f"DeepSpeed {info.get('deepspeed', '?')}'s engine does not run on torch {info['torch']}: "
                      f"{bench.peer_probe['reason']}")
            if peer_info:
                fe = peer_info.get("foreach")
                fe_s = f"foreach={fe}" + (" (torch's default)" if fe is None else "")
                print(f"peer: {bench.peer_impl}, torch {peer_info.get('torch')}, backend {peer_info.get('backend')}, "
                      f"{peer_info.get('wrapper', '')} {peer_info.get('optimizer')} ({fe_s}); threads: torch "
                      f"{peer_info.get('torch_threads')}, interop {peer_info.get('torch_interop_threads')}, OpenBLAS "
                      f"{peer_info.get('openblas_threads')} (core {peer_info.get('openblas_core')})"
                      + (f"; basic optimizer {peer_info['basic_optimizer']}" if peer_info.get("basic_optimizer")
                         else ""))
        print("step time: per run the median of its timed steps (rank 0's wall time per optimizer step); 'step "
              "median' is the median over runs, 'run medians' their min-max, 'all steps' the min-max of every timed "
              "step. Peak RSS: VmHWM of each rank process, median over runs.")
        print()
        print(summary(bench, psi), flush=True)
        failed = [s for s in bench.samples if s["status"] == "failed"]
        if failed:
            print(f"\n{len(failed)} run(s) failed; see the lines marked FAILED above")
            rc = 1
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"info": info, "args": vars(args), "samples": bench.samples}, f, indent=1)
            log(f"wrote {args.json}")
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            kill_group(bench.current, 2.0)
            time.sleep(0.2)
            left = scan(root)
            if left:
                log(f"killing {len(left)} leftover process(es): " + "; ".join(f"{p} {' '.join(c)[:100]}"
                                                                           for p, c in left[:5]))
                kill_pids(p for p, _ in left)
        finally:
            if args.keep:
                log(f"kept {root}")
            else:
                shutil.rmtree(root, ignore_errors=True)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
    return rc


if __name__ == "__main__":
    sys.exit(main())
