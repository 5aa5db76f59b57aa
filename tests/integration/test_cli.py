"""dsrun's command line without starting anything: --dry_run plans (text and JSON), the
no-hostfile rules (DSRUN_LOCAL_SLOTS, CUDA_VISIBLE_DEVICES), and every kind of bad input
giving `dsrun: error: …` on stderr, nothing on stdout, and exit status 2."""
import json
import pytest

from conftest import run

FOUR = "node-a slots=4\nnode-b slots=4 max_slots=8\n# comment\nnode-c slots=2\nnode-d slots=0\n"


def plan(dsrun, env, *args):
    r = run([dsrun, "--dry_run", "--format", "json", *args], env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def hosts_and_slots(p):
    return [(n["host"], n["slots"]) for n in p["nodes"]]


def test_dry_run_json_has_the_documented_shape(dsrun, hostfile, clean_env):
    p = plan(dsrun, clean_env, "-H", hostfile(FOUR), "--export", "A=1", "./train", "--lr", "0.1")
    assert set(p) == {"world_size", "master_addr", "master_port", "transport", "program", "nodes"}
    assert p["world_size"] == 10
    assert p["master_addr"] == "node-a" and p["master_port"] == 29500 and p["transport"] == "ssh"
    assert p["program"] == ["./train", "--lr", "0.1"]
    assert hosts_and_slots(p) == [("node-a", [0, 1, 2, 3]), ("node-b", [0, 1, 2, 3]), ("node-c", [0, 1])]
    last = p["nodes"][2]["ranks"][1]
    assert (last["rank"], last["local_rank"]) == (9, 1)
    env = last["env"]
    assert env["RANK"] == "9" and env["NODE_RANK"] == "2" and env["CROSS_SIZE"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["A"] == "1"
    assert "DS_JOB_TOKEN" not in json.dumps(p)


@pytest.mark.parametrize("args,expected", [
    (["-i", "node-b"], [("node-b", [0, 1, 2, 3])]),
    (["-i", "node-c@node-a:3,1"], [("node-a", [1, 3]), ("node-c", [0, 1])]),  # hostfile order, sorted slots
    (["-e", "node-a@node-b:0"], [("node-b", [1, 2, 3]), ("node-c", [0, 1])]),
    (["--num_nodes", "2"], [("node-a", [0, 1, 2, 3]), ("node-b", [0, 1, 2, 3])]),
    (["--num_gpus", "2"], [("node-a", [0, 1]), ("node-b", [0, 1]), ("node-c", [0, 1])]),
    (["--num_nodes", "1", "--num_gpus", "1"], [("node-a", [0])]),
])
def test_selection_flags(dsrun, hostfile, clean_env, args, expected):
    assert hosts_and_slots(plan(dsrun, clean_env, "-H", hostfile(FOUR), *args, "true")) == expected


@pytest.mark.parametrize("args,message", [
    (["-i", "node-x"], "host 'node-x' is not in the hostfile"),
    (["-i", "node-a:7"], "has no slot 7"),
    (["-i", "node-a", "-e", "node-b"], "mutually exclusive"),
    (["-i", "node-a", "--num_gpus", "1"], "cannot be combined"),
    (["--num_gpus", "3"], "node-c"),
    (["--num_nodes", "9"], "9"),
    (["-e", "node-a@node-b@node-c"], "selection is empty"),
    (["-i", "node-a:x"], "'x'"),
    (["--export", "RANK=5"], "RANK"),
    (["--export", "NOEQUALS"], "NOEQUALS"),
    (["--bind_core_list", "0-3"], "--bind_cores_to_rank"),
    (["--bind_cores_to_rank", "--bind_core_list", "3-1"], "--bind_core_list '3-1': range '3-1' is descending"),
    (["--bind_cores_to_rank", "--bind_core_list", "0,x"], "--bind_core_list '0,x': 'x' is not a core id"),
    (["--bind_cores_to_rank", "--bind_core_list", ""], "--bind_core_list '': the list is empty"),
    (["--bind_cores_to_rank", "--bind_core_list", "0-2"],
     "--bind_core_list '0-2': 3 cores for the 4 ranks on node-a; each rank needs at least one"),
    (["--launcher", "impi"], "--launcher impi: not supported"),
    (["--launcher", "MVAPICH"], "--launcher mvapich: not supported"),
    (["--launcher", "lsf"], "--launcher lsf: must be ssh, pdsh, openmpi, mpich, slurm or local"),
    (["--launcher", "pdsh", "--no_ssh"], "--no_ssh conflicts with --launcher pdsh"),
    (["--bogus"], "--bogus"),
])
def test_bad_input_exits_2_with_a_clear_message(dsrun, hostfile, clean_env, args, message):
    r = run([dsrun, "--dry_run", "--format", "json", "-H", hostfile(FOUR), *args, "true"], clean_env)
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("dsrun: error: ") and message in r.stderr


def test_a_bad_core_list_is_reported_before_any_host_is_contacted(dsrun, hostfile, clean_env):
    # node-x.invalid cannot be resolved: reaching it would fail (exit 1) after a launcher line
    r = run([dsrun, "-H", hostfile("node-x.invalid slots=2\n"), "--bind_cores_to_rank", "--bind_core_list", "1,0",
             "true"], clean_env)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "dsrun: error: --bind_core_list '1,0': '0' does not come after 1 " \
                       "(items must be ascending and not overlap)\n"


@pytest.mark.parametrize("text,where", [
    ("node-a slots=4\nnode-b slots=abc\n", ":2:"),
    ("node-a slots=4\nnode-a slots=2\n", ":2:"),
    ("node-a\n", ":1:"),
    ("node-a slots=-1\n", ":1:"),
    ("# only a comment\n\n", "no hosts"),
])
def test_hostfile_errors_name_the_line(dsrun, hostfile, clean_env, text, where):
    path = hostfile(text)
    r = run([dsrun, "-H", path, "true"], clean_env)
    assert r.returncode == 2
    assert r.stderr.startswith(f"dsrun: error: {path}") and where in r.stderr


def test_a_named_hostfile_that_does_not_exist_is_an_error(dsrun, clean_env):
    r = run([dsrun, "-H", "/nonexistent/hostfile", "true"], clean_env)
    assert r.returncode == 2 and "/nonexistent/hostfile" in r.stderr


def test_no_hostfile_means_this_machine(dsrun, clean_env):
    p = plan(dsrun, dict(clean_env, DSRUN_LOCAL_SLOTS="3"), "true")
    assert p["transport"] == "local" and p["master_addr"] == "127.0.0.1"
    assert hosts_and_slots(p) == [("localhost", [0, 1, 2])]
    assert plan(dsrun, clean_env, "true")["world_size"] >= 1  # GPUs, else CPUs


def test_cuda_visible_devices_becomes_the_local_slots(dsrun, clean_env):
    env = dict(clean_env, CUDA_VISIBLE_DEVICES="1,3")
    p = plan(dsrun, env, "true")
    assert hosts_and_slots(p) == [("localhost", [1, 3])]
    assert p["nodes"][0]["ranks"][1]["env"]["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert hosts_and_slots(plan(dsrun, env, "--num_nodes", "1", "true")) == [("localhost", [1, 3])]


def test_cuda_visible_devices_must_be_numbers(dsrun, clean_env):
    r = run([dsrun, "--dry_run", "true"], dict(clean_env, CUDA_VISIBLE_DEVICES="GPU-1234"))
    assert r.returncode == 2 and "GPU-1234" in r.stderr


def test_dry_run_text(dsrun, hostfile, clean_env):
    r = run([dsrun, "--dry_run", "-H", hostfile(FOUR), "-i", "node-c", "./t"], clean_env)
    assert r.returncode == 0
    assert "node 0 node-c: slots 0,1" in r.stdout and "rank 1 local_rank 1" in r.stdout


def test_help_and_version(dsrun, clean_env):
    r = run([dsrun, "--help"], clean_env)
    assert r.returncode == 0 and "Examples:" in r.stdout and "--include" in r.stdout
    r = run([dsrun, "--version"], clean_env)
    assert r.returncode == 0 and r.stdout.startswith("dsrun ")
    r = run([dsrun], clean_env)
    assert r.returncode == 2 and "no PROGRAM" in r.stderr
