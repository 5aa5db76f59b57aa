"""`dsrun report`: the launcher's and the runtime's facts in one command, on a machine without a CUDA
driver and (through a fake libcuda.so.1, tests/integration/fixtures) with one."""
import ctypes.util, json, os

from conftest import ROOT, run

FAKE_CUDA_DIR = os.environ.get("FAKE_CUDA_DIR", os.path.join(ROOT, "build", "tests", "integration", "fake_cuda"))


def report(dsrun, env, *args):
    r = run([dsrun, "report", *args], env, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_report_names_every_section_and_the_plugins(dsrun, clean_env):
    text = report(dsrun, clean_env)
    for section in ("launcher", "build", "cpu", "openblas", "onednn", "communication", "cuda", "plugins"):
        assert f"\n{section}\n" in "\n" + text, section
    assert "Gloo over TCP" in text and "vector tier" in text
    data = json.loads(report(dsrun, clean_env, "--format", "json"))
    assert data["runtime"]["onednn"]["version"].endswith("(OpenMP)")  # the pool our kernels and OpenBLAS share
    assert data["runtime"]["onednn"]["bf16 matmuls"]  # a oneDNN kernel, or sgemm on the rounded values
    assert data["launcher"]["dsrun"] == data["runtime"]["build"]["dsworker"]
    found = data["runtime"]["plugins"]["plugins found"]
    assert "gpt (" in found and "mlp (" in found
    if ctypes.util.find_library("cuda") is None:  # no CUDA driver here
        assert data["runtime"]["cuda"]["CUDA driver"] == "not found (libcuda.so.1)"


def test_report_with_a_cuda_driver(dsrun, clean_env):
    env = dict(clean_env, LD_LIBRARY_PATH=FAKE_CUDA_DIR)
    cuda = json.loads(report(dsrun, env, "--format", "json"))["runtime"]["cuda"]
    assert cuda["CUDA driver"] == "12.4" and cuda["CUDA devices"] == 2


def test_report_refuses_unknown_arguments(dsrun, clean_env):
    r = run([dsrun, "report", "--formt", "json"], clean_env, timeout=60)
    assert r.returncode == 2 and "unknown argument '--formt'" in r.stderr
