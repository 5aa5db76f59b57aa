#!/usr/bin/python3
"""Launch benchmark: dsrun (over ssh, pdsh, OpenMPI and MPICH) against DeepSpeed's own launcher (its pdsh and
OpenMPI runners) and plain pdsh, in one run.

Setup once (Debian: pdsh, openssh-server, openmpi-bin, mpich; DeepSpeed in <repo>/.venv-bench):
    bench/launch/setup.sh
Run (dsrun must be built: build/cli/dsrun):
    bench/launch/run.py [--reps 5] [--sleep 30] [--slots 4] [--netns] [--json results.json]

Every tool launches 4 x --slots ranks (16 by default) on 4 SSH "hosts" (slots=N each, one hostfile for all):
127.0.0.1..127.0.0.4, served by a throwaway OpenSSH server on one free port (scripts/throwaway_sshd.py), or with
--netns four network namespaces on a bridge, 10.99.0.1..4, each with its own sshd (scripts/netns_hosts.py; needs
root), every launcher then started inside host 1's namespace. Every rank runs the same program,
bench/launch/probe.sh (a POSIX sh script; its start time is `date +%s%N`, CLOCK_REALTIME), which writes
"<start ns> <pid>" to a per-rank file in the run's directory.

Metrics (t0 = time.time_ns() just before the launcher process is spawned):
  1. start-to-all-ranks-running: max(rank start times) - t0, with ranks that exit 0 at once;
  2. start-to-exit: launcher exit - t0, same runs;
  3. teardown: all ranks start and sleep (--sleep seconds) except rank 5, which waits until all 16 are running,
     records its time and exits 1. Measured from that time until the last process of the job (rank processes and
     their descendants, polled every ~5 ms through /proc) is gone; then no process tagged with the run may remain.
     Also recorded: the launcher's exit code, its exit time after the failure, and how many ranks were never
     stopped (they ran out their sleep). Only dsrun and DeepSpeed: plain pdsh has no teardown.

The tools (the repetitions are interleaved, tool after tool, so that background load hits all alike):
  dsrun      build/cli/dsrun -H HOSTFILE --ssh_port P --ssh_identity KEY --ssh_known_hosts KH -q PROBE ARGS
  deepspeed  <venv>/bin/deepspeed --hostfile HOSTFILE --no_python --no_local_rank --master_addr 127.0.0.1
                 --ssh_port P PROBE ARGS
             with PDSH_RCMD_TYPE=ssh and PDSH_SSH_ARGS_APPEND="-F /dev/null -i KEY -o UserKnownHostsFile=KH
             -o StrictHostKeyChecking=yes" (DeepSpeed appends -p P). DeepSpeed's SSH reachability probe
             (plain `ssh -p P host hostname`, which honours no PDSH_* variable) finds the key through an `ssh`
             wrapper put first on PATH, standing in for the user's ~/.ssh/config. --ds-no-ssh-check passes
             --no_ssh_check instead.
  pdsh       pdsh -S -R ssh -w H1,H2,H3,H4 'for l in 0 1 2 3; do RANK=$((%n*4+l)) ... PROBE ARGS & done; wait'
             (same PDSH_SSH_ARGS_APPEND plus -p P): the raw fan-out floor, no launcher logic.
  dsrun-pdsh, dsrun-openmpi, dsrun-mpich   dsrun with --launcher pdsh / openmpi / mpich
  deepspeed-openmpi   deepspeed --launcher openmpi (its mpirun -n WORLD -hostfile HOSTFILE starts the probe once per
             slot) with --launcher_args "--allow-run-as-root (as root) --mca plm_rsh_args '-p P -i KEY ...'"; the
             ranks read OMPI_COMM_WORLD_RANK, as DeepSpeed's do.
All of them run with HOME set to an empty temporary directory.

Output: one table per metric, median (min-max) in ms and the ratio of medians dsrun/peer; --json writes every
sample. Cleanup: the sshd, every process of the benchmark (found by its temporary directory in /proc) and the
temporary directory are removed at the end, on an error, on Ctrl-C and on SIGTERM. Every run has a time limit.
"""
import argparse
import datetime
import json
import os
import platform
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
from common import kill_group, kill_pids, log, proc_state  # noqa: E402  (bench/common.py)
from throwaway_sshd import ThrowawaySshd  # noqa: E402
from netns_hosts import NetnsHosts, cannot_make_namespaces  # noqa: E402

PROBE = os.path.join(HERE, "probe.sh")
HOSTS = 4
SLOTS = 4  # --slots
WORLD = HOSTS * SLOTS
FAIL_RANK = 5
POLL_S = 0.005
TAG_VAR = b"DSRUN_BENCH_TAG="
ALL_TOOLS = ("dsrun", "dsrun-pdsh", "dsrun-openmpi", "dsrun-mpich", "deepspeed", "deepspeed-openmpi", "pdsh")
DEFAULT_TOOLS = ("dsrun", "dsrun-pdsh", "deepspeed", "pdsh")
TEARDOWN_TOOLS = tuple(t for t in ALL_TOOLS if t != "pdsh")
DSRUN_LAUNCHER = {"dsrun": [], "dsrun-pdsh": ["--launcher", "pdsh"], "dsrun-openmpi": ["--launcher", "openmpi"],
                  "dsrun-mpich": ["--launcher", "mpich"]}


def ms(ns):
    return ns / 1e6


# ---------------------------------------------------------------------------------------------------------------
# /proc helpers


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def scan(path):
    """Live processes that belong to `path`: DSRUN_BENCH_TAG starting with it, or `path` in their argv."""
    needle = path.encode()
    found = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if needle in cmd or (b"\0" + TAG_VAR + needle) in env:
            if proc_state(int(d)) is not None:
                found.append((int(d), cmd.replace(b"\0", b" ").decode(errors="replace").strip()[:200]))
    return found




# ---------------------------------------------------------------------------------------------------------------
# The benchmark


class Bench:
    def __init__(self, args, root):
        self.args = args
        self.root = root
        self.sshd = None
        self.samples = []
        self.counter = 0

    # ----- setup

    def setup(self):
        a = self.args
        self.home = os.path.join(self.root, "home")
        self.bindir = os.path.join(self.root, "bin")
        os.makedirs(self.home)
        os.makedirs(self.bindir)
        if a.netns:  # hosts with their own network stacks; the launchers run on host 1
            self.sshd = NetnsHosts(HOSTS, os.path.join(self.root, "netns")).start()
            self.prefix = self.sshd.exec_args(1)
        else:
            self.sshd = ThrowawaySshd(HOSTS, os.path.join(self.root, "sshd")).start()
            self.prefix = []
        s = self.sshd
        self.hostfile = os.path.join(self.root, "hostfile")
        with open(self.hostfile, "w") as f:
            for h in s.hosts:
                f.write(f"{h} slots={SLOTS}\n")
        ssh_opts = ["-F", "/dev/null", "-i", s.identity, "-o", f"UserKnownHostsFile={s.known_hosts}",
                    "-o", "StrictHostKeyChecking=yes"]
        # Stands in for ~/.ssh/config for DeepSpeed's `ssh host hostname` reachability probe.
        wrapper = os.path.join(self.bindir, "ssh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/ssh " + " ".join(shlex.quote(o) for o in ssh_opts) + ' "$@"\n')
        os.chmod(wrapper, 0o755)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PDSH_", "DS_", "DSRUN_"))}
        base["HOME"] = self.home
        self.ssh_opts = ssh_opts
        self.env = {tool: dict(base) for tool in DSRUN_LAUNCHER}
        self.env["deepspeed"] = dict(base, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=" ".join(ssh_opts),
                                     PATH=self.bindir + ":" + base.get("PATH", "/usr/bin:/bin"))
        self.env["deepspeed-openmpi"] = dict(self.env["deepspeed"])
        self.env["pdsh"] = dict(base, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=" ".join(ssh_opts + ["-p", str(s.port)]))
        if a.ds_no_ssh_check:
            for tool in ("deepspeed", "deepspeed-openmpi"):
                self.env[tool]["PATH"] = base.get("PATH", "/usr/bin:/bin")

    def argv(self, tool, probe_args):
        return self.prefix + self.launcher_argv(tool, probe_args)

    def launcher_argv(self, tool, probe_args):
        s = self.sshd
        if tool in DSRUN_LAUNCHER:
            return [self.args.dsrun, "-H", self.hostfile, *DSRUN_LAUNCHER[tool], "--ssh_port", str(s.port),
                    "--ssh_identity", s.identity, "--ssh_known_hosts", s.known_hosts, "-q", PROBE] + probe_args
        if tool in ("deepspeed", "deepspeed-openmpi"):
            extra = ["--no_ssh_check"] if self.args.ds_no_ssh_check else []
            if tool == "deepspeed-openmpi":
                rsh = " ".join(self.ssh_opts + ["-p", str(s.port)])
                root = "--allow-run-as-root " if os.geteuid() == 0 else ""
                extra += ["--launcher", "openmpi", "--launcher_args", f"{root}--mca plm_rsh_args {shlex.quote(rsh)}"]
            return [self.deepspeed, "--hostfile", self.hostfile, "--no_python", "--no_local_rank",
                    "--master_addr", s.hosts[0], "--ssh_port", str(s.port)] + extra + [PROBE] + probe_args
        if tool == "pdsh":
            rank_env = f"RANK=$((%n*{SLOTS}+l)) LOCAL_RANK=$l LOCAL_SIZE={SLOTS} WORLD_SIZE={WORLD}"
            cmd = (f"for l in {' '.join(str(i) for i in range(SLOTS))}; do {rank_env} "
                   f"{shlex.quote(PROBE)} {' '.join(shlex.quote(x) for x in probe_args)} & done; wait")
            return ["pdsh", "-S", "-R", "ssh", "-w", ",".join(s.hosts), cmd]
        raise ValueError(tool)

    # ----- one launch

    def run_once(self, tool, scenario, warmup):
        self.counter += 1
        rundir = os.path.join(self.root, "runs", f"{self.counter:04d}-{scenario}-{tool}")
        os.makedirs(os.path.join(rundir, "start"))
        os.makedirs(os.path.join(rundir, "end"))
        if scenario == "exit":
            probe_args = ["exit", rundir]
            limit = self.args.timeout
        else:
            probe_args = ["teardown", rundir, str(self.args.sleep), str(FAIL_RANK), str(WORLD)]
            limit = self.args.sleep + 30
        argv = self.argv(tool, probe_args)
        sample = {"tool": tool, "scenario": scenario, "warmup": warmup, "ok": True, "errors": [],
                  "sleep_s": self.args.sleep if scenario == "teardown" else None,
                  "argv": argv, "loadavg": open("/proc/loadavg").read().split()[:3]}
        logf = open(os.path.join(rundir, "launcher.log"), "wb")
        exited = {}
        proc = None
        try:
            t0 = time.time_ns()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    env=self.env[tool], cwd=self.root, start_new_session=True)

            def waiter():
                proc.wait()
                exited["t"] = time.time_ns()

            th = threading.Thread(target=waiter, daemon=True)
            th.start()
            deadline = time.monotonic() + limit
            if scenario == "exit":
                th.join(limit)
            else:
                self.watch_teardown(rundir, sample, exited, deadline)
                th.join(max(0.0, deadline - time.monotonic()))
            sample["t0_ns"] = t0
            if "t" not in exited:
                sample["ok"] = False
                sample["errors"].append(f"launcher still running after {limit} s: killed")
                kill_group(proc)
                th.join(5)
            else:
                sample["exit_ms"] = ms(exited["t"] - t0)
            sample["rc"] = proc.returncode
            starts = self.read_starts(rundir)
            sample["starts"] = {r: [ms(t - t0), pid] for r, (t, pid) in sorted(starts.items())}
            if len(starts) == WORLD:
                sample["all_running_ms"] = ms(max(t for t, _ in starts.values()) - t0)
            else:
                sample["ok"] = False
                missing = sorted(set(range(WORLD)) - set(starts))
                sample["errors"].append(f"{len(starts)}/{WORLD} ranks started; missing ranks {missing}")
            if scenario == "exit" and proc.returncode != 0:
                sample["ok"] = False
                sample["errors"].append(f"launcher exit code {proc.returncode}, expected 0")
            if scenario == "teardown" and "t" in exited and proc.returncode != 1:
                sample["ok"] = False
                sample["errors"].append(f"launcher exit code {proc.returncode}, expected 1 (rank {FAIL_RANK}'s)")
            # Nothing of the job may outlive the launcher (a short grace for the process table to settle).
            if "t" in exited:
                time.sleep(0.2)
            left = scan(rundir)
            if left:
                sample["leftovers"] = [f"{pid} {cmd}" for pid, cmd in left]
                sample["ok"] = False
                sample["errors"].append(f"{len(left)} process(es) of the job left after the launcher exited: "
                                        + "; ".join(sample["leftovers"][:5]))
        finally:
            logf.close()
            kill_group(proc)
            left = scan(rundir)
            kill_pids(p for p, _ in left)
            if not sample["ok"]:
                with open(os.path.join(rundir, "launcher.log"), "rb") as f:
                    sample["log_tail"] = f.read()[-3000:].decode(errors="replace")
        self.samples.append(sample)
        self.report_sample(sample)
        return sample

    def read_starts(self, rundir):
        starts = {}
        d = os.path.join(rundir, "start")
        for name in os.listdir(d):
            try:
                with open(os.path.join(d, name)) as f:
                    t, pid = f.read().split()
                starts[int(name)] = (int(t), int(pid))
            except (OSError, ValueError):
                pass
        return starts

    def watch_teardown(self, rundir, sample, exited, deadline):
        """Track the ranks and their descendants; time the job's disappearance after rank 5's failure."""
        startdir = os.path.join(rundir, "start")
        failfile = os.path.join(rundir, "fail")
        tracked = {}  # pid -> starttime (guards against pid reuse)
        rank_pids = {}
        fail_ns = None

        def track(pid):
            if pid not in tracked:
                st = proc_state(pid)
                if st is not None:
                    tracked[pid] = st[1]

        def refresh():
            for name in os.listdir(startdir):
                if name not in rank_pids:
                    try:
                        with open(os.path.join(startdir, name)) as f:
                            rank_pids[name] = int(f.read().split()[1])
                        track(rank_pids[name])
                    except (OSError, ValueError, IndexError):
                        pass
            for pid in list(tracked):
                st = proc_state(pid)
                if st is None or st[1] != tracked[pid]:
                    del tracked[pid]
                    continue
                for c in children(pid):
                    track(c)

        while time.monotonic() < deadline:
            refresh()
            if fail_ns is None:
                sample["tracked_max_before_fail"] = max(sample.get("tracked_max_before_fail", 0), len(tracked))
                try:
                    with open(failfile) as f:
                        fail_ns = int(f.read().split()[0])
                except (OSError, ValueError, IndexError):
                    if "t" in exited:  # the launcher is gone and rank 5 never failed
                        refresh()
                        break
                    time.sleep(POLL_S)
                    continue
            if fail_ns is not None and "tracked_at_fail" not in sample:
                sample["tracked_at_fail"] = len(tracked)
            if not tracked:
                now = time.time_ns()
                stray = scan(rundir)
                # Launcher-side processes (ssh, pdsh, agents) carry the run directory in argv; they are not
                # rank processes. Only tagged ones (probe + descendants) count here.
                stray = [(p, c) for p, c in stray if self.is_tagged(p, rundir)]
                if not stray:
                    sample["teardown_ms"] = ms(now - fail_ns)
                    break
                for p, _ in stray:
                    track(p)
            time.sleep(POLL_S)
        else:
            if fail_ns is not None:
                sample["ok"] = False
                sample["errors"].append(f"job processes still alive {self.args.sleep + 30} s after the launch")
        sample["fail_ns"] = fail_ns
        if fail_ns is None:
            sample["ok"] = False
            sample["errors"].append(f"rank {FAIL_RANK} never recorded its failure")
        # The launcher's own exit after the failure, if it comes before the deadline.
        while "t" not in exited and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if fail_ns is not None and "t" in exited:
            sample["launcher_exit_after_fail_ms"] = ms(exited["t"] - fail_ns)
        sample["ranks_not_stopped"] = len(os.listdir(os.path.join(rundir, "end")))

    @staticmethod
    def is_tagged(pid, rundir):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return (b"\0" + TAG_VAR + rundir.encode() + b"\0") in (b"\0" + f.read())
        except OSError:
            return False

    def report_sample(self, s):
        parts = [f"{s['tool']:17} {s['scenario']:8}{' (warm-up)' if s['warmup'] else ''}"]
        for key, label in (("all_running_ms", "all running"), ("exit_ms", "exit"), ("teardown_ms", "teardown"),
                           ("launcher_exit_after_fail_ms", "launcher exit after failure")):
            if key in s:
                parts.append(f"{label} {s[key]:.0f} ms")
        parts.append(f"rc {s.get('rc')}")
        if "tracked_at_fail" in s:
            parts.append(f"processes tracked before/at the failure {s.get('tracked_max_before_fail')}/"
                         f"{s['tracked_at_fail']}")
        if "ranks_not_stopped" in s:
            parts.append(f"ranks never stopped {s['ranks_not_stopped']}")
        if not s["ok"]:
            parts.append("FAILED: " + " | ".join(s["errors"]))
        log("  " + ", ".join(parts))
        if not s["ok"] and s.get("log_tail"):
            log("    launcher log (tail):\n" + "\n".join("      " + l for l in s["log_tail"].splitlines()[-15:]))

    # ----- the whole run

    def run(self):
        a = self.args
        for scenario, tools in (("exit", a.tools), ("teardown", [t for t in a.tools if t in TEARDOWN_TOOLS])):
            if not tools or scenario not in a.scenarios:
                continue
            log(f"scenario {scenario}:")
            for _ in range(a.warmup if scenario == "exit" else 0):  # warm caches (imports, binaries) once
                for tool in tools:
                    self.run_once(tool, scenario, True)
            for _ in range(a.reps):
                for tool in tools:
                    self.run_once(tool, scenario, False)


# ---------------------------------------------------------------------------------------------------------------
# Reporting


def stats(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def ratio(a, b):
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def table(title, samples, key, tools, note=None):
    lines = [title]
    meds = {}
    lines.append(f"  {'tool':17} {'median':>10} {'min-max':>21} {'runs ok':>8}")
    for tool in tools:
        mine = [s for s in samples if s["tool"] == tool]
        vals = [s[key] for s in mine if s["ok"] and key in s]
        if vals:
            st = stats(vals)
            meds[tool] = st["median"]
            lines.append(f"  {tool:17} {st['median']:>8.0f} ms {st['min']:>8.0f} - {st['max']:>6.0f} ms "
                         f"{len(vals):>4}/{len(mine)}")
        else:
            lines.append(f"  {tool:17} {'-':>10} {'-':>21} {0:>4}/{len(mine)}")
    if "dsrun" in meds:
        ratios = [f"dsrun {ratio(meds['dsrun'], meds[t])} of {t}" for t in tools if t != "dsrun" and t in meds]
        if ratios:
            lines.append("  ratio (medians): " + ", ".join(ratios))
    # The same tool under each launcher: dsrun's pdsh and OpenMPI transports against DeepSpeed's runners.
    pairs = [f"{ours} {ratio(meds[ours], meds[peer])} of {peer}"
             for ours, peer in (("dsrun-pdsh", "deepspeed"), ("dsrun-openmpi", "deepspeed-openmpi"))
             if ours in meds and peer in meds]
    if pairs:
        lines.append("  same tool (medians): " + ", ".join(pairs))
    if note:
        lines.append("  " + note)
    return "\n".join(lines)


def summary(samples, tools):
    main = [s for s in samples if not s["warmup"]]
    ex = [s for s in main if s["scenario"] == "exit"]
    td = [s for s in main if s["scenario"] == "teardown"]
    out = [
        table(f"1. start-to-all-ranks-running ({WORLD} ranks, {HOSTS} hosts x {SLOTS} slots)", ex,
              "all_running_ms", tools),
        table("2. start-to-exit (every rank exits 0 at once)", ex, "exit_ms", tools),
    ]
    ttools = [t for t in tools if t in TEARDOWN_TOOLS]
    if ttools and td:
        never = [t for t in ttools if any(s.get("ranks_not_stopped") for s in td if s["tool"] == t)]
        note = (f"{', '.join(never)}: some ranks were never stopped and ran out their {td[0]['sleep_s']} s sleep, "
                "so that number is the sleep, not a teardown time" if never else None)
        out.append(table(f"3. teardown: rank {FAIL_RANK} exits 1 -> last process of the job gone (polled every "
                         f"{POLL_S * 1000:.0f} ms)", td, "teardown_ms", ttools, note))
        lines = ["   teardown details (per tool, all runs):"]
        for tool in ttools:
            mine = [s for s in td if s["tool"] == tool]
            le = [s["launcher_exit_after_fail_ms"] for s in mine if "launcher_exit_after_fail_ms" in s]
            rcs = sorted({str(s.get("rc")) for s in mine})
            notstopped = [s.get("ranks_not_stopped", 0) for s in mine]
            left = sum(len(s.get("leftovers", [])) for s in mine)
            le_s = (f"median {statistics.median(le):.0f} ms ({min(le):.0f}-{max(le):.0f})" if le else "-")
            lines.append(f"   {tool:17} launcher exit after the failure {le_s}; launcher exit code(s) "
                         f"{','.join(rcs)}; ranks never stopped (ran out their sleep) per run: "
                         f"{','.join(map(str, notstopped))}; leftover processes: {left}")
            if tool == "dsrun":
                gone = [s["teardown_ms"] for s in mine if "teardown_ms" in s]
                met = len(gone) == len(mine) and all(g <= 1000 for g in gone) and not left
                lines.append(f"   {'':17} target (every process gone within 1 s, none left): "
                             f"{'met' if met else 'NOT met'}"
                             + (f", worst {max(gone):.0f} ms" if gone else ""))
        out.append("\n".join(lines))
    return "\n\n".join(out)


def versions(args, deepspeed_py):
    def cmd(argv, stderr=False):
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except OSError:
            return "?"
        try:
            out, err = proc.communicate(timeout=20)
            return ((err if stderr else out) or out or err).strip().splitlines()[0]
        except subprocess.TimeoutExpired:
            kill_group(proc, 1.0)
            return "?"
        except IndexError:
            return "?"

    v = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "kernel": platform.release(),
        "openssh": cmd(["ssh", "-V"], stderr=True),
        "pdsh": cmd(["pdsh", "-V"]),
        "dsrun": cmd([args.dsrun, "--version"]),
        "commit": cmd(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]),
        "sh": os.path.realpath("/bin/sh"),
    }
    if deepspeed_py:
        v["deepspeed"] = cmd([deepspeed_py, "-c", "import importlib.metadata as m; print(m.version('deepspeed'))"])
        v["torch"] = cmd([deepspeed_py, "-c", "import importlib.metadata as m; print(m.version('torch'))"])
        v["deepspeed_python"] = cmd([deepspeed_py, "--version"])
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5, help="measured repetitions per tool and scenario (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured start-to-exit runs per tool first (default 1)")
    p.add_argument("--sleep", type=int, default=30,
                   help="teardown: seconds the surviving ranks sleep; bounds a run that never tears down (default 30)")
    p.add_argument("--timeout", type=int, default=120, help="time limit of one start-to-exit run, s (default 120)")
    p.add_argument("--tools", default=",".join(DEFAULT_TOOLS),
                   help=f"comma-separated, from {','.join(ALL_TOOLS)} (default {','.join(DEFAULT_TOOLS)})")
    p.add_argument("--slots", type=int, default=4, help="slots (ranks) per host; 4 hosts (default 4: 16 ranks)")
    p.add_argument("--netns", action="store_true",
                   help="hosts in network namespaces (10.99.0.1-4, root) instead of loopback addresses")
    p.add_argument("--scenarios", default="exit,teardown",
                   help="exit (metrics 1 and 2), teardown (metric 3), or both (default)")
    p.add_argument("--dsrun", default=os.path.join(REPO, "build", "cli", "dsrun"), help="dsrun binary")
    p.add_argument("--venv", default=os.path.join(REPO, ".venv-bench"), help="venv with DeepSpeed (setup.sh)")
    p.add_argument("--ds-no-ssh-check", action="store_true",
                   help="pass --no_ssh_check to deepspeed (skip its SSH reachability probe)")
    p.add_argument("--json", metavar="PATH", help="write every sample and the environment to PATH")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs) for inspection")
    args = p.parse_args()
    global SLOTS, WORLD
    SLOTS, WORLD = args.slots, HOSTS * args.slots
    if args.slots < 2:
        p.error("--slots must be >= 2 (rank 5 fails in the teardown scenario)")
    if args.netns and cannot_make_namespaces():
        p.error(f"--netns: {cannot_make_namespaces()}")
    args.tools = [t for t in args.tools.split(",") if t]
    bad = [t for t in args.tools if t not in ALL_TOOLS]
    if bad or not args.tools:
        p.error(f"unknown tool(s) {bad}; choose from {','.join(ALL_TOOLS)}")
    args.scenarios = [x for x in args.scenarios.split(",") if x]
    if not args.scenarios or set(args.scenarios) - {"exit", "teardown"}:
        p.error("--scenarios takes exit, teardown or exit,teardown")
    if args.reps < 1 or args.sleep < 2:
        p.error("--reps must be >= 1 and --sleep >= 2")
    args.dsrun = os.path.abspath(args.dsrun)
    args.venv = os.path.abspath(args.venv)
    if "dsrun" in args.tools and not os.access(args.dsrun, os.X_OK):
        p.error(f"{args.dsrun} is not an executable: build it first (scripts/build.sh)")
    deepspeed_py = None
    if {"deepspeed", "deepspeed-openmpi"} & set(args.tools):
        deepspeed_py = os.path.join(args.venv, "bin", "python")
        if not os.access(os.path.join(args.venv, "bin", "deepspeed"), os.X_OK):
            p.error(f"no DeepSpeed in {args.venv}: run bench/launch/setup.sh (or leave it out with --tools)")
    if {"deepspeed", "pdsh", "dsrun-pdsh"} & set(args.tools) and not shutil.which("pdsh"):
        p.error("pdsh is not installed: run bench/launch/setup.sh")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    root = tempfile.mkdtemp(prefix="dsrun-bench-launch-")
    bench = Bench(args, root)
    bench.deepspeed = os.path.join(args.venv, "bin", "deepspeed")
    rc = 0
    try:
        info = versions(args, deepspeed_py)
        info["loadavg_before"] = open("/proc/loadavg").read().split()[:3]
        bench.setup()
        info["command"] = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
        log(f"bench/launch: {info['date']}, {info['cpus']} CPUs ({info['cpu']}), kernel {info['kernel']}, "
            f"load {' '.join(info['loadavg_before'])}")
        log(f"  {info['openssh']}; {info['pdsh']}; {info['dsrun']} (repo at {info['commit']})"
            + (f"; deepspeed {info['deepspeed']} (torch {info['torch']})" if deepspeed_py else ""))
        where = "network namespaces, launchers on host 1" if args.netns else "loopback"
        log(f"  sshd on {','.join(bench.sshd.hosts)}:{bench.sshd.port} ({where}); {WORLD} ranks ({HOSTS} hosts x {SLOTS} slots); "
            f"probe: POSIX sh script bench/launch/probe.sh (/bin/sh = {info['sh']}), start time `date +%s%N`")
        bench.run()
        info["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
        text = summary(bench.samples, args.tools)
        print()
        print(f"bench/launch results, {info['date']}: {args.reps} runs each (+{args.warmup} warm-up), "
              f"{info['cpus']} CPUs, load {' '.join(info['loadavg_before'])} -> {' '.join(info['loadavg_after'])}")
        print(f"probe: POSIX sh script (bench/launch/probe.sh, {info['sh']}), start time from `date +%s%N`"
              + (f"; teardown sleep {args.sleep} s" if "teardown" in args.scenarios else ""))
        if deepspeed_py:
            print(f"deepspeed {info['deepspeed']} (torch {info['torch']}), pdsh runner, "
                  + ("--no_ssh_check" if args.ds_no_ssh_check else "with its SSH reachability probe"))
        print(text, flush=True)
        failed = [s for s in bench.samples if not s["ok"]]
        if failed:
            print(f"\n{len(failed)} run(s) failed; see the lines marked FAILED above"
                  + (" and the JSON samples" if args.json else ""))
            rc = 1
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"info": info, "args": {k: v for k, v in vars(args).items()}, "samples": bench.samples},
                          f, indent=1)
            log(f"wrote {args.json}")
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            kill_pids(p for p, _ in scan(os.path.join(root, "runs")))
            if bench.sshd:
                bench.sshd.stop()
            time.sleep(0.2)
            left = [(pid, c) for pid, c in scan(root)]
            if left:
                log(f"killing {len(left)} leftover process(es): " + "; ".join(f"{p} {c}" for p, c in left[:5]))
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
