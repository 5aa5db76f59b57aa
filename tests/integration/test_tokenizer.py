"""Byte-level BPE tokenizers (Hugging Face tokenizer.json): dstok's ids equal the `tokenizers` package's
(from PyPI, scripts/test-venv.sh) on English, edge-case and random Unicode text, for three forms of the
file (merges as pairs, merges as "a b" strings, add_prefix_space); decoding gives the text back byte
for byte; dsworker trains on text through data.tokenizer and prints its sample as text."""
import json, os, random, struct, subprocess

import pytest

from conftest import ROOT, run

DSTOK = os.environ.get("DSTOK_BIN", os.path.join(ROOT, "build", "worker", "dstok"))
DSWORKER = os.environ.get("DSWORKER_BIN", os.path.join(ROOT, "build", "worker", "dsworker"))
VENV_PYTHON = os.path.join(ROOT, ".venv-tests", "bin", "python")
REFERENCE = os.path.join(os.path.dirname(__file__), "tokenizers_reference.py")
LICENSES = "/usr/share/common-licenses"

EDGE_CASES = ("  Leading spaces, trailing spaces   \n\tTabs\there\r\nCRLF lines\r\n"
              "Contractions: don't, I'm, they're, we've, he'd, you'll, it's; 'quoted' and DON'T.\n"
              "Numbers 3.14159, 1,000,000 and 2026-11-23; x2y3 42nd.\n"
              "Ελληνικά κείμενα, русский текст, 中文字符和標點。日本語のテキスト、한국어 텍스트.\n"
              "Accents: café, naïve, résumé, e\u0301 (combining), Å; ligatures ﬁ ﬂ; ½ ² ³.\n"
              "Emoji: 😀🚀👩‍💻 👍🏽 and symbols ©®™ ∑∫√ ← → ⇒ €£¥.<|endoftext|>Next document after a special token\n"
              "<|endoftext|><|endoftext|>    \n\n\n   \u3000ideographic space\u00a0no-break space\n")


def reference(*args):
    assert os.path.exists(VENV_PYTHON), "run scripts/test-venv.sh (the tokenizers package)"
    r = subprocess.run([VENV_PYTHON, REFERENCE, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def token_ids(path):
    data = open(path, "rb").read()
    n = struct.unpack("<256i", data[:1024])[2]
    return list(struct.unpack(f"<{n}H", data[1024:1024 + 2 * n]))


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """The trained tokenizer.json and two rewritten forms of it."""
    d = tmp_path_factory.mktemp("tok")
    pairs = d / "pairs.json"
    reference("train", LICENSES, str(pairs))
    spec = json.loads(pairs.read_text())
    assert isinstance(spec["model"]["merges"][0], list)
    strings = dict(spec, model=dict(spec["model"], merges=[" ".join(m) for m in spec["model"]["merges"]]))
    (d / "strings.json").write_text(json.dumps(strings))
    prefixed = dict(spec, pre_tokenizer=dict(spec["pre_tokenizer"], add_prefix_space=True))
    (d / "prefix.json").write_text(json.dumps(prefixed))
    return {name: str(d / f"{name}.json") for name in ("pairs", "strings", "prefix")}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpora")
    (d / "edge.txt").write_text(EDGE_CASES, encoding="utf-8", newline="")
    rng = random.Random(7)
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x4e00, 0x4fff), (0x1f300, 0x1f64f)]
    words = []
    for _ in range(3000):
        lo, hi = rng.choice(blocks)
        words.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        words.append(rng.choice([" ", "  ", "\n", "\t", "", " \n "]))
    (d / "random.txt").write_text("".join(words), encoding="utf-8", newline="")
    gpl = open(os.path.join(LICENSES, "GPL-3"), encoding="utf-8").read()
    (d / "english.txt").write_text(gpl, encoding="utf-8", newline="")
    return {name: str(d / f"{name}.txt") for name in ("edge", "random", "english")}


@pytest.mark.parametrize("form", ["pairs", "strings", "prefix"])
@pytest.mark.parametrize("corpus", ["edge", "random", "english"])
def test_ids_equal_the_tokenizers_package_and_decode_round_trips(clean_env, tmp_path, tokenizers, corpora, form,
                                                                 corpus):
    out = tmp_path / "t.bin"
    r = run([DSTOK, "--tokenizer", tokenizers[form], corpora[corpus], "-o", str(out)], clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    ours = token_ids(out)
    expected = json.loads(reference("encode", tokenizers[form], corpora[corpus]))
    assert len(ours) == len(expected)
    first = next((i for i, (a, b) in enumerate(zip(ours, expected)) if a != b), None)
    assert first is None, f"first difference at token {first}: ours {ours[first]}, tokenizers {expected[first]}"
    back = tmp_path / "back.txt"
    r = run([DSTOK, "--decode", "--tokenizer", tokenizers[form], str(out), "-o", str(back)], clean_env, timeout=120)
    assert r.returncode == 0, r.stderr
    original = open(corpora[corpus], "rb").read()
    if form == "prefix":  # a space before each piece of text (around special tokens) that lacks one
        pieces = original.split(b"<|endoftext|>")
        original = b"<|endoftext|>".join(p if p == b"" or p.startswith(b" ") else b" " + p for p in pieces)
    assert back.read_bytes() == original


def test_invalid_utf8_is_an_error_naming_the_file_and_byte(clean_env, tmp_path, tokenizers):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"valid text, then \xff\xfe junk")
    r = run([DSTOK, "--tokenizer", tokenizers["pairs"], str(bad), "-o", str(tmp_path / "t.bin")], clean_env)
    assert r.returncode == 2 and f"input: {bad}: invalid UTF-8 at byte 17" in r.stderr, r.stderr


def test_dsworker_trains_through_the_tokenizer_and_samples_text(clean_env, tmp_path, tokenizers):
    with open(os.path.join(ROOT, "configs", "demo.json")) as f:
        cfg = json.load(f)
    cfg["model"].update(vocab_size=1024, seq_len=32, n_layer=2, n_embd=64)
    cfg["data"] = {"path": LICENSES, "tokenizer": tokenizers["pairs"], "val_fraction": 0.05, "eval_samples": 64}
    cfg["sample"] = {"prompt": "This program is free software", "length": 24, "temperature": 0}
    cfg["train_micro_batch_size_per_gpu"] = 8
    cfg["scheduler"]["params"]["total_num_steps"] = 30
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    r = run([DSWORKER, "--model", "gpt", "--config", str(path), "--steps", "30"], clean_env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"BPE {tokenizers['pairs']}, vocabulary 1000" in r.stderr
    sample = r.stdout.split("sample after step 30")[1].splitlines()[1]
    assert sample.startswith("This program is free software") and "[" not in sample  # text, not ids
