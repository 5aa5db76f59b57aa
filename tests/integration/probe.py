#!/usr/bin/python3
"""The program integration tests run as each rank. It records what a test needs to check in
OUTDIR (shared by every "host": they are loopback addresses on one machine), then behaves as
asked. Usage: probe.py OUTDIR [--fail-rank R --code C] [--kill-rank R --signal S]
                              [--child] [--sleep S] [--trap] [--ignore-term]
Files: env.<RANK>.json (environment, DS_JOB_TOKEN replaced by its SHA-256), argv.<RANK>.json,
pid.<RANK> (its pid, plus its child's pid with --child), signal.<RANK> (with --trap)."""
import argparse, hashlib, json, os, signal, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument("outdir")
p.add_argument("--fail-rank", type=int, default=-1)
p.add_argument("--code", type=int, default=3)
p.add_argument("--kill-rank", type=int, default=-1)
p.add_argument("--signal", type=int, default=9)
p.add_argument("--child", action="store_true", help="start a grandchild `sleep` in the rank's process group")
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--trap", action="store_true", help="record SIGINT/SIGTERM/SIGHUP in signal.<RANK>, then exit 0")
p.add_argument("--ignore-term", action="store_true", help="ignore SIGINT and SIGTERM")
p.add_argument("--local_rank", default=None)
args, _ = p.parse_known_args()

rank = os.environ.get("RANK", "?")
out = args.outdir

def write(name, text):
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))

env = dict(os.environ)
if "DS_JOB_TOKEN" in env:
    env["DS_JOB_TOKEN"] = hashlib.sha256(env["DS_JOB_TOKEN"].encode()).hexdigest()
env["__cwd"] = os.getcwd()
env["__affinity"] = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
write(f"env.{rank}.json", json.dumps(env))
write(f"argv.{rank}.json", json.dumps(sys.argv))
print(f"hello stdout from rank {rank}", flush=True)
print(f"hello stderr from rank {rank}", file=sys.stderr, flush=True)

if args.trap:
    def on_signal(signo, frame):
        write(f"signal.{rank}", str(signo))
        sys.exit(0)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
if args.ignore_term:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

pids = [os.getpid()]
if args.child:
    pids.append(subprocess.Popen(["sleep", "1000"]).pid)
write(f"pid.{rank}", " ".join(map(str, pids)))

if args.sleep > 0:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    deadline = time.time() + 30
    while time.time() < deadline and sum(f.startswith("pid.") for f in os.listdir(out)) < world:
        time.sleep(0.01)  # every rank is running before anyone fails
    if str(args.fail_rank) == rank:
        sys.exit(args.code)
    if str(args.kill_rank) == rank:
        os.kill(os.getpid(), args.signal)
    end = time.time() + args.sleep
    while time.time() < end:
        time.sleep(0.05)
