#!/usr/bin/python3
"""Collective benchmark in the style of nccl-tests: all-reduce, reduce-scatter, all-gather and broadcast bus
bandwidth over a range of sizes at 2 and 4 ranks on this machine (loopback TCP), our Gloo process group
(runtime/comm, build/bench/comm_bench) against torch.distributed over gloo, in one run.

Setup once: bench/zero/setup.sh (PyPI's current torch in <repo>/.venv-bench-torch); or --python /usr/bin/python3
for Debian's torch 1.13, whose gloo has no reduce_scatter (all_reduce stands in, labelled).
Run (build/bench/comm_bench must be built: scripts/build.sh, or cmake --build build --target comm_bench):
    bench/comm/run.py [--ranks 2,4] [--min-bytes 1K] [--max-bytes 256M] [--factor 4] [--reps 3] [--tcp]

Ours moves the data of ranks on one host through shared memory; --tcp keeps it on loopback TCP
(DS_COMM_SHM=0), as torch's gloo does.

Each side is N fresh processes (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT, OMP_NUM_THREADS=1),
sides interleaved over --reps repetitions. Per op and size, 2 untimed calls, then I = clamp(budget / size, 3, 100)
timed calls (--budget-bytes, default 512M); time = the slowest rank's mean per call. As nccl-tests: size is the
whole buffer (reduce_scatter's input, allgather's output), fp32, sum; algbw = size / time; busbw = algbw times
2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather) or 1 (broadcast), which makes the ring algorithms'
figures comparable with the link's bandwidth. Reported: medians over repetitions, and ours / torch of busbw.
The default top size is 256 MiB: a 1 GiB all-reduce at 4 ranks holds about 8 GiB on each side (--max-bytes 1G).
"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from common import REPO, kill_pids, log  # noqa: E402
from throwaway_sshd import free_port  # noqa: E402

OPS = ("allreduce", "reduce_scatter", "allgather", "broadcast")


def bus_factor(op, n):
    return {"allreduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "allgather": (n - 1) / n}.get(op, 1.0)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def human(nbytes):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes // size}{unit}"
    return str(nbytes)


def run_side(a, side, ranks):
    """Runs one side at `ranks` ranks; returns rank 0's JSON records (or raises with the failing rank's error)."""
    sweep = ["--ops", ",".join(a.ops), "--min-bytes", str(a.min_bytes), "--max-bytes", str(a.max_bytes),
             "--factor", str(a.factor), "--budget-bytes", str(a.budget_bytes)]
    argv = [a.ours, *sweep] if side == "ours" else [a.python, os.path.join(HERE, "peer_torch.py"), *sweep]
    port = free_port()
    procs = []
    try:
        for rank in range(ranks):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "DS_", "GLOO_"))}
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1", DS_COMM_TIMEOUT="600",
                       DS_COMM_SHM="0" if a.tcp else "1")
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=3600) for p in procs]
    finally:
        kill_pids([p.pid for p in procs if p.poll() is None])
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{side} at {ranks} ranks: {(err.strip().splitlines() or ['?'])[-1]}")
    return [json.loads(line) for line in outs[0][0].splitlines() if line.startswith("{")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--budget-bytes", default="512M")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ours", default=os.path.join(REPO, "build", "bench", "comm_bench"))
    p.add_argument("--python", default=os.path.join(REPO, ".venv-bench-torch", "bin", "python"))
    p.add_argument("--tcp", action="store_true", help="ours over loopback TCP instead of shared memory")
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args()
    a.ops = a.ops.split(",")
    a.min_bytes, a.max_bytes, a.budget_bytes = (parse_bytes(x) for x in (a.min_bytes, a.max_bytes, a.budget_bytes))
    rank_counts = [int(r) for r in a.ranks.split(",")]
    records = []
    for rep in range(a.reps):
        for ranks in rank_counts:
            for side in ("ours", "torch"):
                log(f"rep {rep + 1}/{a.reps}: {side} at {ranks} ranks")
                records += run_side(a, side, ranks)
    torch_info = next((r for r in records if r["side"] == "torch"), {})
    transport = next((r["transport"] for r in records if r["side"] == "ours"), "?")
    print(f"bus bandwidth, GB/s (10^9 B/s), median of {a.reps} runs; ours: runtime/comm's Gloo group over "
          f"{transport}; torch {torch_info.get('torch', '?')} over gloo (loopback TCP); one machine")
    for ranks in rank_counts:
        for op in a.ops:
            impl = next((r.get("impl") for r in records if r["side"] == "torch" and r["op"] == op), "?")
            print(f"\n{op} at {ranks} ranks (torch: {impl})")
            print(f"{'size':>6} {'ours us':>10} {'torch us':>10} {'ours busbw':>11} {'torch busbw':>12} {'ours/torch':>11}")
            nbytes = a.min_bytes
            while nbytes <= a.max_bytes:
                t = {side: statistics.median([r["time_us"] for r in records if r["side"] == side
                                              and r["op"] == op and r["ranks"] == ranks and r["bytes"] == nbytes])
                     for side in ("ours", "torch")}
                bw = {side: nbytes / (t[side] * 1e-6) * bus_factor(op, ranks) / 1e9 for side in t}
                print(f"{human(nbytes):>6} {t['ours']:10.1f} {t['torch']:10.1f} {bw['ours']:11.4f} {bw['torch']:12.4f} "
                      f"{bw['ours'] / bw['torch']:10.2f}x")
                nbytes *= a.factor
    if a.json:
        with open(a.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
