"""dsrun --max_restarts: after a rank fails (or an agent is lost) the whole job is torn down and
started again with the same plan, up to N times; each restart is printed with its cause, ranks
see DSRUN_RESTART_COUNT, and a signal to dsrun stops the job without a restart. Real processes:
a POSIX sh rank program on two local slots."""
import json, os, signal, subprocess, sys
import pytest

from conftest import ROOT, alive, run, wait_all_gone, wait_for_files

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from throwaway_sshd import free_port  # noqa: E402

# rank.sh OUTDIR MODE. Writes OUTDIR/ran.<RANK>.<attempt> (its environment as NAME=VALUE lines,
# the token as a hash), waits until every rank of the attempt has written its own (so no rank is
# torn down before it is recorded), then:
#   fail-once  rank 1 exits 3 on attempt 0; everything else exits 0
#   always     rank 1 exits 3; the other ranks sleep until they are stopped
#   sleep      sleep until stopped
#   hold-once  sleep until stopped on attempt 0; exit 0 afterwards
RANK_SH = r"""#!/bin/sh
out=$1 mode=$2 k=$DSRUN_RESTART_COUNT
{
  echo "RANK=$RANK"
  echo "PID=$$"
  echo "PPID=$PPID"
  echo "DSRUN_RESTART_COUNT=$DSRUN_RESTART_COUNT"
  echo "DSRUN_MAX_RESTARTS=$DSRUN_MAX_RESTARTS"
  echo "TORCHELASTIC_RESTART_COUNT=$TORCHELASTIC_RESTART_COUNT"
  echo "MASTER_PORT=$MASTER_PORT"
  echo "DS_JOB_ID=$DS_JOB_ID"
  echo "TOKEN_HASH=$(printf %s "$DS_JOB_TOKEN" | sha256sum | cut -c1-16)"
} > "$out/.tmp.$RANK.$k"
mv "$out/.tmp.$RANK.$k" "$out/ran.$RANK.$k"
n=0
while [ "$(ls "$out" | grep -c "^ran\.[0-9]*\.$k\$")" -lt "$WORLD_SIZE" ] && [ $n -lt 1000 ]; do
  sleep 0.01; n=$((n + 1))
done
echo "rank $RANK attempt $k"
case $mode in
  fail-once) [ "$RANK" = 1 ] && [ "$k" = 0 ] && exit 3; exit 0 ;;
  always) [ "$RANK" = 1 ] && exit 3; exec sleep 60 ;;
  sleep) exec sleep 60 ;;
  hold-once) [ "$k" = 0 ] && exec sleep 60; exit 0 ;;
esac
exit 9
"""


@pytest.fixture
def rank_sh(tmp_path):
    path = tmp_path / "rank.sh"
    path.write_text(RANK_SH)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def two_slots(clean_env):
    return dict(clean_env, DSRUN_LOCAL_SLOTS="2")


def runs(outdir):
    """{(rank, attempt): {NAME: VALUE}} for every ran.<rank>.<attempt> marker."""
    found = {}
    for name in os.listdir(outdir):
        if name.startswith("ran."):
            _, rank, attempt = name.split(".")
            with open(os.path.join(outdir, name)) as f:
                found[int(rank), int(attempt)] = dict(line.split("=", 1) for line in f.read().splitlines())
    return found


def pids(outdir):
    return [int(r["PID"]) for r in runs(outdir).values()]


def restart_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("dsrun: restart ")]


def test_a_rank_that_fails_once_is_restarted_and_the_job_succeeds(dsrun, outdir, two_slots, rank_sh):
    port = free_port()
    r = run([dsrun, "--max_restarts", "2", "--master_port", str(port), rank_sh, outdir, "fail-once"], two_slots)
    assert r.returncode == 0, r.stderr
    assert restart_lines(r.stderr) == ["dsrun: restart 1/2 after: rank 1 on localhost exited with code 3"]
    assert "dsrun: error:" not in r.stderr  # the failure that was retried is not the job's end
    seen = runs(outdir)
    assert sorted(seen) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # every rank ran twice, nobody a third time
    for (rank, attempt), e in seen.items():
        assert e["RANK"] == str(rank)
        assert e["DSRUN_RESTART_COUNT"] == e["TORCHELASTIC_RESTART_COUNT"] == str(attempt)
        assert e["DSRUN_MAX_RESTARTS"] == "2"
        assert e["MASTER_PORT"] == str(port)  # the same plan
        assert e["DS_JOB_ID"] == seen[0, 0]["DS_JOB_ID"]
    assert seen[0, 0]["TOKEN_HASH"] == seen[1, 0]["TOKEN_HASH"]
    assert seen[0, 1]["TOKEN_HASH"] == seen[1, 1]["TOKEN_HASH"]
    assert seen[0, 0]["TOKEN_HASH"] != seen[0, 1]["TOKEN_HASH"]  # a fresh rendezvous secret per attempt
    assert "[rank 0] rank 0 attempt 1" in r.stdout.splitlines()
    assert wait_all_gone(pids(outdir), within=1.0) == []


def test_restarts_run_out_and_dsrun_exits_with_the_ranks_status(dsrun, outdir, two_slots, rank_sh):
    r = run([dsrun, "--max_restarts", "2", rank_sh, outdir, "always"], two_slots)
    assert r.returncode == 3, r.stderr
    assert restart_lines(r.stderr) == [f"dsrun: restart {k}/2 after: rank 1 on localhost exited with code 3"
                                       for k in (1, 2)]
    assert "dsrun: error: rank 1 on localhost exited with code 3; stopping all ranks (no restarts left: 2 of 2 used)" \
        in r.stderr.splitlines()
    assert sorted(runs(outdir)) == [(rank, attempt) for rank in (0, 1) for attempt in (0, 1, 2)]
    assert wait_all_gone(pids(outdir), within=1.0) == []  # every attempt's sleeping rank 0 was stopped


def test_without_max_restarts_nothing_is_restarted(dsrun, outdir, two_slots, rank_sh):
    r = run([dsrun, rank_sh, outdir, "fail-once"], two_slots)
    assert r.returncode == 3, r.stderr
    assert restart_lines(r.stderr) == []
    assert "dsrun: error: rank 1 on localhost exited with code 3; stopping all ranks" in r.stderr.splitlines()
    assert sorted(runs(outdir)) == [(0, 0), (1, 0)]
    assert runs(outdir)[0, 0]["DSRUN_RESTART_COUNT"] == "0"


def test_a_signal_to_dsrun_stops_the_job_without_a_restart(dsrun, outdir, two_slots, rank_sh):
    proc = subprocess.Popen([dsrun, "--max_restarts", "3", rank_sh, outdir, "sleep"], env=two_slots,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_files(outdir, "ran.", 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert restart_lines(err) == []
    assert sorted(runs(outdir)) == [(0, 0), (1, 0)]
    assert wait_all_gone(pids(outdir), within=1.0) == []


def test_a_lost_agent_is_a_failure_that_restarts(dsrun, outdir, two_slots, rank_sh):
    proc = subprocess.Popen([dsrun, "--max_restarts", "1", rank_sh, outdir, "hold-once"], env=two_slots,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_files(outdir, "ran.", 2)
    first = runs(outdir)
    agent = int(first[0, 0]["PPID"])  # the rank's parent is the node agent
    with open(f"/proc/{agent}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[1] == b"agent"
    os.kill(agent, signal.SIGKILL)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    lines = restart_lines(err)
    assert len(lines) == 1 and lines[0].startswith("dsrun: restart 1/1 after: localhost: ") and "SIGKILL" in lines[0], err
    assert sorted(runs(outdir)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert not alive(agent)
    assert wait_all_gone([int(e["PID"]) for e in first.values()], within=1.0) == []


def test_a_program_that_cannot_run_is_not_restarted(dsrun, two_slots):
    r = run([dsrun, "--max_restarts", "3", "no-such-program-xyz"], two_slots)
    assert r.returncode == 1
    assert "cannot execute 'no-such-program-xyz'" in r.stderr
    assert restart_lines(r.stderr) == []


def test_json_output_has_a_restart_event(dsrun, outdir, two_slots, rank_sh):
    r = run([dsrun, "--format", "json", "--max_restarts", "1", rank_sh, outdir, "fail-once"], two_slots)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    restarts = [e for e in events if e["event"] == "restart"]
    assert restarts == [{"event": "restart", "restart": 1, "max_restarts": 1,
                         "cause": "rank 1 on localhost exited with code 3"}]
    assert not any(e["event"] == "error" for e in events)
    assert events[-1] == {"event": "done", "exit_code": 0}


def test_quiet_still_prints_restarts(dsrun, outdir, two_slots, rank_sh):
    r = run([dsrun, "--quiet", "--max-restarts", "1", rank_sh, outdir, "fail-once"], two_slots)
    assert r.returncode == 0, r.stderr
    assert restart_lines(r.stderr) == ["dsrun: restart 1/1 after: rank 1 on localhost exited with code 3"]


def test_dry_run_shows_max_restarts(dsrun, two_slots):
    r = run([dsrun, "--dry_run", "--format", "json", "--max_restarts", "4", "true"], two_slots)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["max_restarts"] == 4
    env = p["nodes"][0]["ranks"][1]["env"]
    assert env["DSRUN_RESTART_COUNT"] == "0" and env["DSRUN_MAX_RESTARTS"] == "4"
    r = run([dsrun, "--dry_run", "true"], two_slots)
    assert "max restarts" not in r.stdout


@pytest.mark.parametrize("value", ["-1", "abc", "1.5"])
def test_a_bad_max_restarts_is_a_usage_error(dsrun, two_slots, value):
    r = run([dsrun, "--max_restarts", value, "true"], two_slots)
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"dsrun: error: --max_restarts '{value}' is not a non-negative integer\n"
    assert r.stdout == ""


def test_max_restarts_cannot_be_exported(dsrun, two_slots):
    r = run([dsrun, "--export", "DSRUN_RESTART_COUNT=5", "true"], two_slots)
    assert r.returncode == 2 and "DSRUN_RESTART_COUNT" in r.stderr
