"""Reads a TensorBoard log directory with TensorBoard's own reader and checks every record's masked
CRC-32C; prints {tag: [[step, value], ...]} as JSON. Run with .venv-tests/bin/python."""
import glob, json, struct, sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c


def check_records(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        (length,) = struct.unpack("<Q", data[i:i + 8])
        (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        body = data[i + 12:i + 12 + length]
        (body_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        assert length_crc == masked_crc32c(data[i:i + 8]), f"{path}: bad length CRC at byte {i}"
        assert body_crc == masked_crc32c(body), f"{path}: bad record CRC at byte {i}"
        i += 16 + length


logdir = sys.argv[1]
for path in glob.glob(f"{logdir}/events.out.tfevents.*"):
    check_records(path)
acc = event_accumulator.EventAccumulator(logdir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
