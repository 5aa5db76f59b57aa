"""dstok through a subprocess: text inputs (files, directories, globs) become one byte-level token
file in llm.c's layout holding their bytes in order; bad inputs give `dstok: error: …` naming the
input and exit status 2."""
import os, struct
import pytest

from conftest import ROOT, run

DSTOK = os.environ.get("DSTOK_BIN", os.path.join(ROOT, "build", "worker", "dstok"))


@pytest.fixture(scope="module")
def dstok():
    if not os.access(DSTOK, os.X_OK):
        pytest.fail(f"dstok binary not found at {DSTOK} (build first, or set DSTOK_BIN)")
    return DSTOK


def read_token_file(path):
    """(tokens, vocab) of a token file, checked as llm.c's reader checks it."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240520 and header[1] == 1
    n = header[2]
    assert len(data) == 1024 + 2 * n
    return list(struct.unpack(f"<{n}H", data[1024:])), header[3]


def test_inputs_become_one_byte_level_token_file(dstok, tmp_path):
    (tmp_path / "corpus" / "b").mkdir(parents=True)
    (tmp_path / "corpus" / "a.txt").write_bytes(b"hello ")
    (tmp_path / "corpus" / "b" / "c.txt").write_bytes("w\u00f6rld\n".encode())
    (tmp_path / "corpus" / "empty.txt").write_bytes(b"")
    (tmp_path / "x.md").write_bytes(b"[md]")
    out = tmp_path / "out.bin"
    r = run([dstok, str(tmp_path / "corpus"), str(tmp_path / "*.md"), "-o", str(out)], os.environ)
    assert r.returncode == 0, r.stderr
    expected = b"hello " + "w\u00f6rld\n".encode() + b"[md]"
    assert r.stdout == f"dstok: 3 files, {len(expected)} tokens (byte-level) -> {out}\n"
    tokens, vocab = read_token_file(out)
    assert tokens == list(expected) and vocab == 256
    assert sorted(os.listdir(tmp_path)) == ["corpus", "out.bin", "x.md"]  # no temporary file left


def test_a_missing_input_exits_2_naming_it(dstok, tmp_path):
    (tmp_path / "a.txt").write_text("text")
    missing = str(tmp_path / "nope" / "*.txt")
    r = run([dstok, str(tmp_path / "a.txt"), missing, "-o", str(tmp_path / "out.bin")], os.environ)
    assert r.returncode == 2
    assert r.stderr == f"dstok: error: input: '{missing}' matches no file\n"
    assert r.stdout == "" and not (tmp_path / "out.bin").exists()


def test_a_token_file_as_input_is_refused(dstok, tmp_path):
    (tmp_path / "a.txt").write_text("text")
    first = tmp_path / "first.bin"
    assert run([dstok, str(tmp_path / "a.txt"), "-o", str(first)], os.environ).returncode == 0
    r = run([dstok, str(tmp_path), "-o", str(tmp_path / "again.bin")], os.environ)
    assert r.returncode == 2
    assert f"'{first}' is already a token file" in r.stderr


@pytest.mark.parametrize("args,expected", [
    ([], "INPUT is required"),
    (["x.txt"], "--output is required"),
    (["-o", "out.bin"], "INPUT is required"),
    (["x.txt", "-o", "out.bin", "--bogus"], "--bogus"),
])
def test_bad_arguments_exit_2(dstok, tmp_path, args, expected):
    r = run([dstok, *args], os.environ, cwd=tmp_path)
    assert r.returncode == 2
    assert expected in r.stderr


def test_only_empty_inputs_exit_2(dstok, tmp_path):
    (tmp_path / "e.txt").write_text("")
    r = run([dstok, str(tmp_path / "e.txt"), "-o", str(tmp_path / "out.bin")], os.environ)
    assert r.returncode == 2
    assert r.stderr == "dstok: error: input: every file is empty (1 file)\n"
