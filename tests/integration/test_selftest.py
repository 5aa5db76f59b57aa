"""dsworker --selftest where no GPU is usable (every machine this project has tested on): it says why
and exits with status 3, which ctest's `gpu` label counts as skipped. The checks themselves run on the
SIMT emulator in the unit tests (tests/unit/selftest) and on a real GPU through `ctest -L gpu`."""
import os
import pytest

from conftest import ROOT, run

DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))


@pytest.mark.parametrize("visible", [None, ""], ids=["default", "CUDA_VISIBLE_DEVICES empty"])
def test_selftest_without_a_usable_gpu_says_why_and_exits_3(clean_env, tmp_path, visible):
    env = dict(clean_env) if visible is None else dict(clean_env, CUDA_VISIBLE_DEVICES=visible)
    report = tmp_path / "selftest.json"
    r = run([DSWORKER, "--selftest", "--selftest_json", str(report)], env, timeout=60)
    if r.returncode != 3 and "dsworker --selftest: device" in r.stdout:
        pytest.skip("a GPU is usable here: `ctest -L gpu` runs the self-test on it")
    assert r.returncode == 3, (r.stdout, r.stderr)
    reasons = ("dsworker --selftest: no usable GPU: cuda: cudaGetDeviceCount: cudaError",
               "dsworker --selftest: no GPU is visible",
               "dsworker --selftest: this dsworker was built without CUDA")
    assert any(reason in r.stderr for reason in reasons), r.stderr
    assert r.stdout == "" and not report.exists()
