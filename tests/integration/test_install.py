"""`cmake --install build --prefix P` gives a working installation: every program, both built-in model
plugins (found by name from P/bin/dsworker), the demo job's model trains from there, and the example
out-of-tree plugin (examples/bigram) builds with find_package(dsrun) and trains on 2 ranks."""
import json, os, subprocess

from conftest import ROOT, run
from throwaway_sshd import free_port


def test_the_installed_prefix_trains_the_gpt_and_reports(clean_env, tmp_path):
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", os.path.join(ROOT, "build"), "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for program in ("dsrun", "dsworker", "dstok", "dsckpt"):
        assert os.access(prefix / "bin" / program, os.X_OK), program
    for plugin in ("mlp", "gpt"):
        assert (prefix / "lib" / "dsrun" / "plugins" / f"libds_model_{plugin}.so").exists(), plugin
    with open(os.path.join(ROOT, "configs", "demo.json")) as f:
        cfg = json.load(f)
    cfg["model"].update(n_layer=1, n_embd=32, seq_len=32)
    cfg["data"]["eval_samples"] = 32
    del cfg["sample"]  # an untrained model's bytes need not be UTF-8
    cfg["checkpoint"] = {"dir": str(tmp_path / "ck")}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    env = dict(clean_env, PATH=f"{prefix / 'bin'}:{clean_env.get('PATH', '/usr/bin:/bin')}")
    r = run([str(prefix / "bin" / "dsworker"), "--model", "gpt", "--config", str(tmp_path / "c.json"), "--steps", "3"],
            env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "done: 3 steps" in r.stdout
    r = run([str(prefix / "bin" / "dsckpt"), "inspect", str(tmp_path / "ck")], env)
    assert r.returncode == 0 and "checksums ok" in r.stdout, r.stderr
    r = run([str(prefix / "bin" / "dsrun"), "report", "--format", "json"], env)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)["runtime"]["plugins"]["plugins found"]
    assert f"gpt ({prefix / 'lib' / 'dsrun' / 'plugins' / 'libds_model_gpt.so'})" in found

    # examples/bigram: an out-of-tree plugin built with find_package(dsrun) against the prefix, run by name.
    example = tmp_path / "bigram-build"
    for args in (["-S", os.path.join(ROOT, "examples", "bigram"), "-B", str(example), f"-DCMAKE_PREFIX_PATH={prefix}"],
                 ["--build", str(example)]):
        r = subprocess.run(["cmake", *args], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    with open(os.path.join(ROOT, "examples", "bigram", "bigram.json")) as f:
        cfg = json.load(f)
    del cfg["sample"]
    (tmp_path / "bigram.json").write_text(json.dumps(cfg))
    m = tmp_path / "m.jsonl"
    r = run([str(prefix / "bin" / "dsrun"), "--num_gpus", "2", "--master_port", str(free_port()),
             str(prefix / "bin" / "dsworker"), "--model", "bigram",
             "--config", str(tmp_path / "bigram.json"), "--steps", "40", "--metrics", str(m)],
            dict(env, DSRUN_LOCAL_SLOTS="2", DSWORKER_PLUGIN_PATH=str(example / "plugins")), timeout=120)
    assert r.returncode == 0, r.stderr
    losses = [json.loads(line)["loss"] for line in m.read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 40 and losses[-1] < 0.75 * losses[0], losses


def test_the_debian_package_holds_a_working_installation(clean_env, tmp_path):
    """cpack's .deb: its dependencies from dpkg-shlibdeps, and its files, unpacked, train a model."""
    r = subprocess.run(["cpack", "--config", os.path.join(ROOT, "build", "CPackConfig.cmake"), "-B", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (deb,) = [p for p in os.listdir(tmp_path) if p.endswith(".deb")]
    info = subprocess.run(["dpkg-deb", "-f", str(tmp_path / deb), "Package", "Depends"], capture_output=True, text=True)
    assert info.stdout.startswith("Package: dsrun\n")
    for dependency in ("libssh-4", "libgloo0", "libopenblas0-openmp", "libyaml-cpp0.7"):
        assert dependency in info.stdout, dependency
    root = tmp_path / "root"
    assert subprocess.run(["dpkg-deb", "-x", str(tmp_path / deb), str(root)]).returncode == 0
    dsworker = root / "usr" / "bin" / "dsworker"
    r = run([str(dsworker), "--model", "mlp", "--config", os.path.join(ROOT, "configs", "mlp.json"), "--steps", "3"],
            clean_env, timeout=60)
    assert r.returncode == 0 and "done: 3 steps" in r.stdout, r.stderr
