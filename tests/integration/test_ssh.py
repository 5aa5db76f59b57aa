"""dsrun over real SSH: a throwaway OpenSSH server on loopback, 127.0.0.1 and 127.0.0.2 as two
hosts. Checks the rank environment rank by rank, environment forwarding with hostile values,
failure propagation and cleanup on every host, and the SSH error paths."""
import hashlib, json, os, re, shutil, signal, socket, subprocess, sys, threading, time
import pytest

from conftest import PROBE, ThrowawaySshd, job_pids, read_envs, run, wait_all_gone, wait_for_files

PY = "/usr/bin/python3"
TWO_HOSTS = "127.0.0.1 slots=2\n127.0.0.2 slots=2   # second host\n"


def launch(dsrun, sshd, hf, *args):
    return [dsrun, "-H", hf, *sshd.ssh_args(), *args]


def test_four_ranks_on_two_hosts_get_the_documented_environment(dsrun, sshd, hostfile, outdir, clean_env):
    r = run(launch(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir), clean_env)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert sorted(envs) == [0, 1, 2, 3]
    tokens = {e["DS_JOB_TOKEN"] for e in envs.values()}
    assert len(tokens) == 1, "every rank shares one job token"
    for rank, e in envs.items():
        node = rank // 2
        assert e["RANK"] == str(rank)
        assert e["LOCAL_RANK"] == str(rank % 2)
        assert e["WORLD_SIZE"] == "4"
        assert e["LOCAL_SIZE"] == e["LOCAL_WORLD_SIZE"] == "2"
        assert e["CROSS_RANK"] == e["NODE_RANK"] == e["GROUP_RANK"] == str(node)
        assert e["CROSS_SIZE"] == "2"
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["MASTER_PORT"] == "29500"
        assert e["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert e["DS_ACCELERATOR"] in ("cpu", "cuda")
        assert e["DS_JOB_ID"] == envs[0]["DS_JOB_ID"]
        assert e["__cwd"] == os.getcwd()
        assert e["SSH_CONNECTION"].split()[2] == f"127.0.0.{node + 1}", "each rank ran on its own host"
    # Output is relayed line by line with host and rank, on the stream the rank used.
    for rank in range(4):
        host = f"127.0.0.{rank // 2 + 1}"
        assert f"{host}: [rank {rank}] hello stdout from rank {rank}" in r.stdout.splitlines()
        assert f"{host}: [rank {rank}] hello stderr from rank {rank}" in r.stderr.splitlines()
    # The token itself never appears in what dsrun prints.
    raw = [line for line in (r.stdout + r.stderr).split() if len(line) == 32]
    assert all(hashlib.sha256(t.encode()).hexdigest() not in tokens for t in raw)
    assert "MASTER_ADDR=127.0.0.1" in r.stderr


def test_environment_values_travel_byte_exact(dsrun, sshd, hostfile, outdir, clean_env, tmp_path):
    awkward = "a b 'single' \"double\" $HOME `id` ; rm -rf /tmp/nothing && echo \\ back\\slash \t tab"
    multiline = "line one\nline two; $(whoami)\n"
    cwd = tmp_path / "work dir; with $pace"
    cwd.mkdir()
    (cwd / ".deepspeed_env").write_text("# comment line\n\nDSE_PLAIN=value=with=equals\n"
                                        "DSE_QUOTED = 'quoted value with $dollar'\r\n")
    env = dict(clean_env, NCCL_AWKWARD=awkward, PYTHONFOO="py;$x", NOT_FORWARDED_SECRET="x")
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), "--export", f"EXP_AWK={awkward}",
                  "--export", f"EXP_MULTI={multiline}", "--export", "EXP_EMPTY=", PY, PROBE, outdir)
    r = run(args, env, cwd=str(cwd))
    assert r.returncode == 0, r.stderr
    remote = read_envs(outdir)[3]  # a rank on the second host
    assert remote["NCCL_AWKWARD"] == awkward
    assert remote["PYTHONFOO"] == "py;$x"
    assert remote["EXP_AWK"] == awkward
    assert remote["EXP_MULTI"] == multiline
    assert remote["EXP_EMPTY"] == ""
    assert remote["DSE_PLAIN"] == "value=with=equals"
    assert remote["DSE_QUOTED"] == "quoted value with $dollar"
    assert "NOT_FORWARDED_SECRET" not in remote, "only DeepSpeed's prefixes, .deepspeed_env and --export travel"
    assert remote["__cwd"] == str(cwd)


def test_program_arguments_are_not_interpreted_by_a_shell(dsrun, sshd, hostfile, outdir, clean_env):
    tricky = ["a b", "$HOME", "`id`", "'q'", ";", "&&", "\n", ""]
    r = run(launch(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, *tricky), clean_env)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(outdir, "argv.2.json")) as f:
        assert json.load(f)[2:] == tricky


def test_a_rank_exiting_3_stops_every_rank_on_every_host(dsrun, sshd, hostfile, outdir, clean_env):
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, "--child", "--sleep", "60",
                  "--fail-rank", "2", "--code", "3")
    start = time.monotonic()
    r = run(args, clean_env)
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - start < 20
    assert "rank 2 on 127.0.0.2 exited with code 3" in r.stderr
    pids = job_pids(outdir)
    assert len(pids) == 8  # 4 ranks + their grandchildren
    assert wait_all_gone(pids, within=1.0) == []


def test_a_rank_killed_by_sigkill_gives_137(dsrun, sshd, hostfile, outdir, clean_env):
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, "--child", "--sleep", "60",
                  "--kill-rank", "1", "--signal", "9")
    r = run(args, clean_env)
    assert r.returncode == 137, r.stderr
    assert "rank 1 on 127.0.0.1 killed by SIGKILL" in r.stderr
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_agents_clean_up_when_dsrun_is_killed(dsrun, sshd, hostfile, outdir, clean_env):
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), "--kill_grace", "1", PY, PROBE, outdir, "--child",
                  "--sleep", "120")
    proc = subprocess.Popen(args, env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_files(outdir, "pid.", 4)
        proc.kill()  # SIGKILL: dsrun gets no chance to clean up; the agents must
        proc.wait()
        assert wait_all_gone(job_pids(outdir), within=5.0) == []
    finally:
        proc.kill()


def test_sigterm_to_dsrun_stops_every_host(dsrun, sshd, hostfile, outdir, clean_env):
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), PY, PROBE, outdir, "--trap", "--sleep", "120")
    proc = subprocess.Popen(args, env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_files(outdir, "pid.", 4)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err
    for rank in range(4):  # each rank got the signal dsrun received, and could exit cleanly
        with open(os.path.join(outdir, f"signal.{rank}")) as f:
            assert f.read() == str(signal.SIGTERM)
    assert wait_all_gone(job_pids(outdir), within=1.0) == []


def test_unknown_host_key_is_refused_with_its_fingerprint(dsrun, sshd, hostfile, clean_env, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    args = [dsrun, "-H", hostfile(TWO_HOSTS), "--ssh_port", str(sshd.port), "--ssh_identity", sshd.identity,
            "--ssh_known_hosts", str(empty), "true"]
    r = run(args, clean_env, timeout=30)
    assert r.returncode == 1
    assert "unknown host key" in r.stderr and "SHA256:" in r.stderr and "127.0.0." in r.stderr
    assert "--ssh_accept_new" in r.stderr


def test_accept_new_records_the_key_then_checks_it(dsrun, sshd, hostfile, outdir, clean_env, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    base = [dsrun, "-H", hostfile(TWO_HOSTS), "--ssh_port", str(sshd.port), "--ssh_identity", sshd.identity,
            "--ssh_known_hosts", str(kh)]
    r = run(base + ["--ssh_accept_new", "true"], clean_env)
    assert r.returncode == 0, r.stderr
    assert kh.read_text().count("\n") >= 2
    r = run(base + ["true"], clean_env)  # now known: no flag needed
    assert r.returncode == 0, r.stderr


def test_changed_host_key_is_an_error(dsrun, sshd, hostfile, clean_env, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key_data = (tmp_path / "other_key.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key_data}\n[127.0.0.2]:{sshd.port} {key_type} {key_data}\n")
    args = [dsrun, "-H", hostfile(TWO_HOSTS), "--ssh_port", str(sshd.port), "--ssh_identity", sshd.identity,
            "--ssh_known_hosts", str(kh), "true"]
    r = run(args, clean_env, timeout=30)
    assert r.returncode == 1
    assert "HOST KEY CHANGED" in r.stderr


def test_nothing_listening_is_a_quick_clear_error(dsrun, sshd, hostfile, clean_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    args = [dsrun, "-H", hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n"), "--ssh_port", str(closed_port),
            "--ssh_identity", sshd.identity, "--ssh_known_hosts", sshd.known_hosts, "true"]
    start = time.monotonic()
    r = run(args, clean_env, timeout=30)
    assert r.returncode == 1
    assert f"port {closed_port}" in r.stderr and "cannot connect" in r.stderr
    assert time.monotonic() - start < 5


def test_a_host_that_never_answers_times_out(dsrun, sshd, hostfile, clean_env):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP connections but never sends an SSH banner
    port = silent.getsockname()[1]
    try:
        args = [dsrun, "-H", hostfile("127.0.0.1 slots=1\n127.0.0.2 slots=1\n"), "--ssh_port", str(port),
                "--ssh_timeout", "2", "--ssh_identity", sshd.identity, "--ssh_known_hosts", sshd.known_hosts, "true"]
        start = time.monotonic()
        r = run(args, clean_env, timeout=60)
        elapsed = time.monotonic() - start
        assert r.returncode == 1
        assert "127.0.0." in r.stderr
        assert elapsed < 12, f"took {elapsed:.1f} s with --ssh_timeout 2"
    finally:
        silent.close()


def test_wrong_user_key_is_an_authentication_error(dsrun, sshd, hostfile, clean_env, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    args = [dsrun, "-H", hostfile(TWO_HOSTS), "--ssh_port", str(sshd.port), "--ssh_identity", str(stranger),
            "--ssh_known_hosts", sshd.known_hosts, "true"]
    r = run(args, clean_env, timeout=30)
    assert r.returncode == 1
    assert "refused key" in r.stderr


def test_missing_remote_dsrun_names_the_host(dsrun, sshd, hostfile, clean_env):
    args = launch(dsrun, sshd, hostfile(TWO_HOSTS), "--remote_dsrun", "/nonexistent/dsrun", "true")
    r = run(args, clean_env, timeout=30)
    assert r.returncode == 1
    assert "could not start the agent" in r.stderr and "/nonexistent/dsrun" in r.stderr and "127.0.0." in r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_working_directory_missing_on_a_host_is_an_error(dsrun, hostfile, clean_env, tmp_path):
    # A second sshd whose sessions see an empty tmpfs over `hidden`, so the launcher's cwd,
    # which exists here, does not exist on that "host".
    hidden = tmp_path / "hidden"
    (hidden / "work").mkdir(parents=True)
    wrapper = ["unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs '{hidden}' && exec \"$0\" \"$@\""]
    with ThrowawaySshd(1, str(tmp_path / "sshd2"), wrapper=wrapper) as other:
        args = [dsrun, "-H", hostfile("127.0.0.1 slots=1\n"), "--launcher", "ssh", *other.ssh_args(), "true"]
        r = run(args, clean_env, cwd=str(hidden / "work"), timeout=30)
    assert r.returncode == 1
    assert f"working directory '{hidden}/work' is not usable" in r.stderr
    assert "127.0.0.1" in r.stderr


def test_per_rank_logs_are_written_on_each_host(dsrun, sshd, hostfile, outdir, clean_env, tmp_path):
    logs = tmp_path / "logs"
    r = run(launch(dsrun, sshd, hostfile(TWO_HOSTS), "--enable_each_rank_log", str(logs), PY, PROBE, outdir),
            clean_env)
    assert r.returncode == 0, r.stderr
    # <timestamp>_rank<N>.log; each host's agent stamps its own files (as DeepSpeed's per-node
    # launch.py does), so the two hosts' timestamps may differ by a second: match on the rank.
    files = {re.fullmatch(r"\d{14}_rank(\d+)\.log", f).group(1): f for f in os.listdir(logs)}
    assert sorted(files) == ["0", "1", "2", "3"], os.listdir(logs)
    text = (logs / files["3"]).read_text()
    assert "hello stdout from rank 3" in text and "hello stderr from rank 3" in text


def test_ssh_config_and_user_at_host_are_honoured(dsrun, sshd, hostfile, outdir, clean_env):
    # No --ssh_* flags at all: the port, key and known_hosts come from ~/.ssh/config, and the
    # hostfile names a config alias and a user@host.
    ssh_dir = os.path.join(clean_env["HOME"], ".ssh")
    os.makedirs(ssh_dir)
    with open(os.path.join(ssh_dir, "config"), "w") as f:
        f.write(f"Host second\n  HostName 127.0.0.2\n\nHost *\n  Port {sshd.port}\n  IdentityFile {sshd.identity}\n"
                f"  UserKnownHostsFile {sshd.known_hosts}\n")
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    hf = hostfile(f"{user}@127.0.0.1 slots=1\nsecond slots=1\n")
    r = run([dsrun, "-H", hf, PY, PROBE, outdir], clean_env)
    assert r.returncode == 0, r.stderr
    envs = read_envs(outdir)
    assert envs[0]["SSH_CONNECTION"].split()[2] == "127.0.0.1"
    assert envs[1]["SSH_CONNECTION"].split()[2] == "127.0.0.2"
    assert f"{user}@127.0.0.1: [rank 0] hello stdout from rank 0" in r.stdout
