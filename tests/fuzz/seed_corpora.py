#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/corpus/<target>/ from the tests' own inputs: the string
literals the unit tests parse, the example hostfiles and configs, the integration tests' configs,
and small valid protocol frames, store requests, checkpoint and token files. Run once; the seeds
are committed (named seed-*), next to the regression inputs fuzzing found (named crash-*)."""
import json
import pathlib
import re
import struct
import zlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fuzz/corpus"
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def literals(source, call):
    """The string literals (adjacent ones joined, raw ones too) passed first to `call(` in source."""
    out = []
    for m in re.finditer(re.escape(call) + r"\(\s*((?:(?:R\"\((?:.|\n)*?\)\"|\"(?:\\.|[^\"\\])*\")\s*)+)", source):
        text = ""
        for part in re.finditer(r'R"\(((?:.|\n)*?)\)"|"((?:\\.|[^"\\])*)"', m.group(1)):
            if part.group(1) is not None:
                text += part.group(1)
            else:
                text += re.sub(r"\\(.)", lambda e: ESCAPES.get(e.group(1), e.group(1)), part.group(2))
        out.append(text)
    return out


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data if isinstance(data, bytes) else data.encode())


def main():
    unit = ROOT / "tests/unit"
    hostfiles = literals((unit / "test_hostfile.cpp").read_text(), "parse")
    hostfiles += [p.read_text() for p in sorted((ROOT / "hostfiles").iterdir())]
    for i, text in enumerate(hostfiles):
        write("hostfile", f"{i:02}", text)
    specs = literals((unit / "test_selection.cpp").read_text(), "select")
    specs += re.findall(r'\.include = "([^"]*)"', (unit / "test_selection.cpp").read_text())
    pool = "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n"
    for i, spec in enumerate(specs):
        write("selection", f"{i:02}", bytes([0, 0]) + f"{spec}\n\n{pool}".encode())
        write("selection", f"{i:02}x", bytes([2, 3]) + f"\n{spec}\n{pool}".encode())
    cluster = (unit / "test_cluster_tools.cpp").read_text()
    lists = literals(cluster, "hosts")
    counts = re.findall(r'counts\("([^"]*)", \d+\)', cluster)
    for i, hostlist in enumerate(lists):
        write("slurm_env", f"{i:02}", f"{hostlist}\n{counts[i % len(counts)]}")
    for i, text in enumerate(literals((unit / "test_env_file.cpp").read_text(), "parse")):
        write("env_file", f"{i:02}", text)
    configs = sorted((ROOT / "configs").glob("*.json")) + sorted((ROOT / "tests/integration/configs").glob("*.json"))
    for p in configs:
        write("config_json", p.stem, p.read_bytes())
    for p in sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "tests/integration/configs").glob("*.yaml")):
        write("config_yaml", p.stem, p.read_bytes())

    # Protocol frames (cli/protocol.h): u32 BE length, u8 type, fields (i32 BE, u32-length strings).
    def frame(payload):
        return struct.pack(">I", len(payload)) + payload

    def s(text):
        return struct.pack(">I", len(text)) + text.encode()

    def i32(*values):
        return b"".join(struct.pack(">i", v) for v in values)

    version = int(re.search(r"kVersion = (\d+)", (ROOT / "cli/protocol.h").read_text()).group(1))
    env = struct.pack(">I", 1) + s("A") + s("1")
    plan = (bytes([1]) + i32(version) + s("node-a") + s("/tmp") + struct.pack(">I", 2) + s("dsworker") + s("--steps")
            + env + struct.pack(">I", 1) + i32(0, 0) + env + s("") + i32(5000) + bytes([0])
            + struct.pack(">I", 2) + i32(0, 1) + bytes([1]))
    write("protocol", "plan", bytes([7]) + frame(plan) + frame(bytes([2]) + i32(15, 5000)))
    write("protocol", "agent", bytes([3]) + frame(bytes([3]) + i32(version, 4242)) + frame(bytes([4]) + i32(0, 4243))
          + frame(bytes([5]) + i32(0, 1) + s("step 1 loss 2.5")) + frame(bytes([6]) + i32(0, 0, 0))
          + frame(bytes([7]) + s("cwd missing")) + frame(bytes([8])))

    # Store requests (runtime/comm/wire.h): u32 LE length, op, fields (i64 LE, u32 LE strings).
    def sframe(payload):
        return struct.pack("<I", len(payload)) + payload

    def ss(text):
        return struct.pack("<I", len(text)) + text.encode()

    def rec(conn, data, later=False):  # the fuzz target's records: flags, length, bytes
        out = b""
        for k in range(0, max(len(data), 1), 255):
            chunk = data[k:k + 255]
            out += bytes([conn | (2 if later and k == 0 else 0), len(chunk)]) + chunk
        return out

    hello = sframe(bytes([1]) + ss("dsstore/1") + ss("fuzz-job-token"))
    ops = (sframe(bytes([2]) + ss("rank0") + ss("addr")) + sframe(bytes([3]) + ss("rank1") + struct.pack("<q", 5000))
           + sframe(bytes([4]) + struct.pack("<q", 2) + ss("rank0") + ss("rank1") + struct.pack("<q", 60000))
           + sframe(bytes([5]) + ss("count") + struct.pack("<q", 1)) + sframe(bytes([6]) + ss("rank0")))
    write("store_server", "session", bytes([0]) + rec(0, hello) + rec(0, ops) + rec(1, hello)
          + rec(1, sframe(bytes([2]) + ss("rank1") + ss("x"))) + rec(0, b"", later=True))
    write("store_server", "authed", bytes([3]) + rec(0, ops) + rec(1, ops, later=True))
    write("store_server", "wrong-token", bytes([0]) + rec(0, sframe(bytes([1]) + ss("dsstore/1") + ss("nope")) + ops))
    write("store_server", "not-a-client", bytes([0]) + rec(1, b"GET / HTTP/1.1\r\n\r\n"))

    # Checkpoint files (runtime/checkpoint/format.h).
    def ckpt(header, tensors):
        data, entries = b"", []
        for name, values in tensors:
            raw = struct.pack(f"<{len(values)}f", *values)
            entries.append({"name": name, "elements": len(values), "offset": len(data), "crc32": zlib.crc32(raw)})
            data += raw
        text = json.dumps(dict(header, tensors=entries), separators=(",", ":")).encode()
        return b"DSCKPT\0\0" + struct.pack("<IIQ", 1, zlib.crc32(text), len(text)) + text + data

    write("checkpoint", "rank", bytes([0]) + ckpt({"kind": "optim_states", "rank": 0, "world_size": 1, "runs": [[0, 3]]},
                                                  [("fp32", [1, 2, 3]), ("exp_avg", [0, 0.5, 0])]))
    write("checkpoint", "empty", bytes([1]) + ckpt({"kind": "model_states"}, []))
    model = {"kind": "model_states", "steps": 3, "updates": 3, "writers": 2, "num_params": 6, "world_size": 2,
             "zero_stage": 1, "precision": "fp32", "run": {"model": "mlp"},
             "loss_scaler": {"scale": 65536.0, "iteration": 3, "last_overflow": -1, "hysteresis_left": 2},
             "params": [{"name": "w", "shape": [2, 2]}, {"name": "b", "shape": [2]}]}
    rank = lambda r, run: json.dumps({"kind": "optim_states", "rank": r, "world_size": 2, "runs": [run]})
    write("dsckpt_inspect", "two-ranks", f"{json.dumps(model)}\n--\n{rank(0, [0, 3])}\n--\n1 2 3\n--\n"
                                         f"{rank(1, [3, 3])}\n--\n4 5 6\n")
    model.update(writers=1, num_params=2)
    model.pop("loss_scaler")
    write("dsckpt_inspect", "one-rank", f"{json.dumps(model)}\n--\n{rank(0, [0, 2])}\n--\n0.5 -1\n")

    # Token files (runtime/data/token_file.h).
    def tokens(ids, vocab):
        return struct.pack("<256i", 20240520, 1, len(ids), vocab, *([0] * 252)) + struct.pack(f"<{len(ids)}H", *ids)

    write("token_file", "bytes", bytes([0]) + tokens(list(b"hello world"), 256))
    write("token_file", "gpt2", bytes([1]) + tokens([50256, 15496, 995], 50257))
    write("token_file", "unknown-vocab", bytes([0]) + tokens([7], 0))


if __name__ == "__main__":
    main()
