"""Hostile peers against a real 2-rank dsworker job: while it trains, clients connect to rank 0's
rendezvous store with random bytes, absurd length fields, a wrong token, half-open and idle
connections, and many connections at once. The job must finish with the same losses as an
undisturbed run, rank 0's peak memory must stay near the undisturbed run's (nothing is allocated
from an unauthenticated length), and each bad peer is refused with a logged reason. Then the node
agent's control channel gets random bytes and an absurd frame length: it stops with a protocol
error, at once."""
import json, os, random, re, socket, struct, subprocess, threading, time

from conftest import ROOT, run

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
CONFIG = os.path.join(ROOT, "configs", "mlp.json")
STEPS = "4000"  # about 15 s on this machine: the attacks, and the 10 s Hello timeout, happen while it trains


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f]


def peak_rss_mib(stdout):
    m = re.search(r"peak RSS ([\d.]+) (KiB|MiB|GiB)", stdout)
    assert m, stdout
    return float(m.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m.group(2)]


def start_job(dsrun, env, port, metrics):
    return subprocess.Popen([dsrun, "--num_gpus", "2", "--master_port", str(port), DSWORKER, "--model", "mlp",
                             "--config", CONFIG, "--steps", STEPS, "--metrics", str(metrics)],
                            env=dict(env, DSRUN_LOCAL_SLOTS="2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def connect(port, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def string(b):
    return struct.pack("<I", len(b)) + b


def attack(port, sockets, errors):
    """Every kind of bad peer, once the store listens; idle sockets are kept in `sockets`."""
    rng = random.Random(7)
    try:
        for _ in range(20):  # random bytes
            s = connect(port)
            s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000))))
            sockets.append(s)
        s = connect(port)  # an absurd length, before any token: 4 GiB
        s.sendall(b"\xff\xff\xff\xff" + b"x" * 100)
        sockets.append(s)
        s = connect(port)  # a Hello announcing a 1 GiB token
        s.sendall(frame(b"\x01" + string(b"dsstore/1") + struct.pack("<I", 1 << 30)))
        sockets.append(s)
        s = connect(port)  # the wrong token, then a set it must not get to do
        s.sendall(frame(b"\x01" + string(b"dsstore/1") + string(b"0" * 32)) + frame(b"\x02" + string(b"k") + string(b"v")))
        sockets.append(s)
        s = connect(port)  # half-open: says nothing, closes its sending side
        s.shutdown(socket.SHUT_WR)
        sockets.append(s)
        for _ in range(50):  # idle
            sockets.append(connect(port))
        for _ in range(300):  # many connections, opened and dropped
            connect(port).close()
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))


def test_hostile_store_peers_change_nothing(dsrun, clean_env, tmp_path):
    base_metrics = tmp_path / "base.jsonl"
    r = run([dsrun, "--num_gpus", "2", "--master_port", str(free_port()), DSWORKER, "--model", "mlp", "--config",
             CONFIG, "--steps", STEPS, "--metrics", str(base_metrics)], dict(clean_env, DSRUN_LOCAL_SLOTS="2"),
            timeout=180)
    assert r.returncode == 0, r.stderr
    base_rss = peak_rss_mib(r.stdout)

    port = free_port()
    metrics = tmp_path / "attacked.jsonl"
    job = start_job(dsrun, clean_env, port, metrics)
    sockets, errors = [], []
    attacker = threading.Thread(target=attack, args=(port, sockets, errors))
    attacker.start()
    started = time.monotonic()
    try:
        out, err = job.communicate(timeout=240)
    finally:
        attacker.join()
        for s in sockets:
            s.close()
    assert job.returncode == 0, err
    assert not errors, errors
    assert losses(metrics) == losses(base_metrics)
    assert peak_rss_mib(out) < base_rss + 64, (peak_rss_mib(out), base_rss)
    refused = re.findall(r"store: refused a connection from 127\.0\.0\.1:\d+: (.*)", err)
    assert "wrong job token" in refused, err
    assert refused.count("not a dsrun store client") >= 20, err  # random bytes, the absurd lengths
    if "step 4000/4000" in out and time.monotonic() - started > 12:
        assert refused.count("no job token within 10 s") >= 50, err  # the idle ones, at least


def test_agent_control_channel_garbage_stops_the_agent(dsrun, clean_env):
    cases = {
        "random bytes": bytes(random.Random(3).getrandbits(8) for _ in range(4096)),
        "absurd length": b"\xff\xff\xff\xf0" + b"x" * 64,
        "zero length": b"\x00\x00\x00\x00",
        "unknown type": b"\x00\x00\x00\x01\x63",
    }
    for name, data in cases.items():
        start = time.monotonic()
        p = subprocess.run([dsrun, "agent"], input=data, env=clean_env, capture_output=True, timeout=30)
        assert p.returncode != 0, name
        # The agent reports to its launcher: an Error message on the channel (dsrun prints it).
        assert b"agent: protocol: " in p.stdout, (name, p.stdout)
        assert time.monotonic() - start < 10, name
    # A frame cut short by the channel closing: the agent stops (nothing to run), without waiting.
    p = subprocess.run([dsrun, "agent"], input=b"\x00\x00\x01\x00\x01", env=clean_env, capture_output=True,
                       timeout=30)
    assert p.returncode != 0
