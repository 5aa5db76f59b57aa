"""dsrun's local transport: real processes on this machine. Output relay, exit statuses,
signals (one and two Ctrl-C), no leftovers, per-rank logs, core binding, --pass_local_rank,
and the JSON-lines output."""
import json, os, signal, subprocess, time
import pytest

from conftest import PROBE, job_pids, read_envs, run, wait_all_gone, wait_for_files

PY = "/usr/bin/python3"


@pytest.fixture
def two_slots(clean_env):
    return dict(clean_env, DSRUN_LOCAL_SLOTS="2")


def test_ranks_get_their_environment_and_output_is_prefixed(dsrun, outdir, two_slots):
    r = run([dsrun, PY, PROBE, outdir], two_slots)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1]
    for rank, e in envs.items():
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["CROSS_SIZE"]) == (str(rank), str(rank), "2", "1")
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert len(e["DS_JOB_TOKEN"]) == 64  # present (hashed by the probe)
    assert "[rank 1] hello stdout from rank 1" in r.stdout.splitlines()
    assert "[rank 0] hello stderr from rank 0" in r.stderr.splitlines()
    assert "hello stderr" not in r.stdout


def test_quiet_and_no_prefix(dsrun, outdir, two_slots):
    r = run([dsrun, "--quiet", PY, PROBE, outdir], two_slots)
    assert r.returncode == 0
    assert r.stderr.splitlines() == [f"hello stderr from rank {i}" for i in (0, 1)] or \
        sorted(r.stderr.splitlines()) == ["hello stderr from rank 0", "hello stderr from rank 1"]
    r = run([dsrun, "--no_prefix", PY, PROBE, outdir], two_slots)
    assert sorted(r.stdout.splitlines()) == ["hello stdout from rank 0", "hello stdout from rank 1"]
    assert "dsrun:" in r.stderr  # launcher messages stay


@pytest.mark.parametrize("how,status", [(["--fail-rank", "1", "--code", "3"], 3),
                                        (["--kill-rank", "0", "--signal", "9"], 137),
                                        (["--kill-rank", "1", "--signal", "11"], 139)])
def test_a_failing_rank_sets_the_exit_status_and_nothing_is_left(dsrun, outdir, two_slots, how, status):
    r = run([dsrun, PY, PROBE, outdir, "--child", "--sleep", "60", *how], two_slots)
    assert r.returncode == status, r.stderr
    assert "on localhost" in r.stderr and "stopping all ranks" in r.stderr
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_a_clean_run_exits_zero_and_leaves_no_grandchildren(dsrun, outdir, two_slots):
    r = run([dsrun, PY, PROBE, outdir, "--child"], two_slots)  # ranks exit, their `sleep 1000` children remain
    assert r.returncode == 0, r.stderr
    pids = job_pids(outdir)
    assert len(pids) == 4
    assert wait_all_gone(pids, within=1.0) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_dsrun_reaches_every_rank_and_sets_128_plus_n(dsrun, outdir, two_slots, sig):
    proc = subprocess.Popen([dsrun, PY, PROBE, outdir, "--trap", "--sleep", "60"], env=two_slots,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_files(outdir, "pid.", 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + sig, err
    for rank in (0, 1):
        with open(os.path.join(outdir, f"signal.{rank}")) as f:
            assert f.read() == str(int(sig))
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_a_second_ctrl_c_kills_at_once(dsrun, outdir, two_slots):
    proc = subprocess.Popen([dsrun, "--kill_grace", "30", PY, PROBE, outdir, "--ignore-term", "--sleep", "60"],
                            env=two_slots, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_files(outdir, "pid.", 2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert proc.poll() is None, "ranks ignore SIGINT; the grace period is 30 s"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - start < 3
    assert proc.returncode == 130, err
    assert "killing all ranks" in err
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_sigkill_after_the_grace_period(dsrun, outdir, two_slots):
    start = time.monotonic()
    r = run([dsrun, "--kill_grace", "1", PY, PROBE, outdir, "--ignore-term", "--sleep", "60",
             "--fail-rank", "0", "--code", "5"], two_slots)
    assert r.returncode == 5
    assert time.monotonic() - start < 10
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_dsrun_killed_leaves_nothing_behind(dsrun, outdir, two_slots):
    proc = subprocess.Popen([dsrun, "--kill_grace", "1", PY, PROBE, outdir, "--child", "--sleep", "120"],
                            env=two_slots, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_files(outdir, "pid.", 2)
    proc.kill()
    proc.wait()
    assert wait_all_gone(job_pids(outdir), within=5.0) == []


def test_a_program_that_cannot_run_is_a_clear_error(dsrun, two_slots):
    r = run([dsrun, "no-such-program-xyz"], two_slots)
    assert r.returncode == 1
    assert "cannot execute 'no-such-program-xyz'" in r.stderr


def test_each_rank_log(dsrun, outdir, two_slots, tmp_path):
    r = run([dsrun, "--log_dir", str(tmp_path / "logs"), PY, PROBE, outdir], two_slots)
    assert r.returncode == 0, r.stderr
    files = sorted(os.listdir(tmp_path / "logs"))
    assert [f.split("_")[1] for f in files] == ["rank0.log", "rank1.log"]
    assert "hello stdout from rank 1" in (tmp_path / "logs" / files[1]).read_text()


def test_bind_cores_gives_each_rank_its_share(dsrun, outdir, clean_env):
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2:
        pytest.skip("needs 2 CPUs")
    r = run([dsrun, "--bind_cores_to_rank", PY, PROBE, outdir], dict(clean_env, DSRUN_LOCAL_SLOTS="2"))
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    a, b = (set(envs[i]["__affinity"].split(",")) for i in (0, 1))
    assert a and b and not (a & b)
    assert envs[0]["OMP_NUM_THREADS"] == str(len(a))
    r = run([dsrun, "--bind_cores_to_rank", "--bind_core_list", "1", PY, PROBE, outdir],
            dict(clean_env, DSRUN_LOCAL_SLOTS="1"))
    assert r.returncode == 0, r.stderr
    assert read_envs(outdir)[0]["__affinity"] == "1"


def test_pass_local_rank(dsrun, outdir, two_slots):
    r = run([dsrun, "--pass_local_rank", PY, PROBE, outdir, "--x"], two_slots)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(outdir, "argv.1.json")) as f:
        assert json.load(f)[1:] == [outdir, "--x", "--local_rank=1"]  # appended after PROGRAM's arguments


def test_json_lines_output(dsrun, outdir, two_slots):
    r = run([dsrun, "--format", "json", PY, PROBE, outdir, "--sleep", "5", "--fail-rank", "1", "--code", "4"],
            two_slots)
    assert r.returncode == 4
    events = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"output", "exit", "error", "done"} <= kinds
    assert {"event": "exit", "host": "localhost", "rank": 1, "code": 4, "signal": 0} in events
    assert events[-1] == {"event": "done", "exit_code": 4}
    assert any(e["event"] == "output" and e["stream"] == "stderr" and e["rank"] == 0 for e in events)
