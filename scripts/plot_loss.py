#!/usr/bin/env python3
"""Draws a loss curve PNG from dsworker's --metrics JSON lines with gnuplot.

usage: scripts/plot_loss.py METRICS.jsonl OUT.png [--title TEXT]

Training steps (lines with "loss") are drawn against the step; validation passes (lines with
"val_loss") as points on the same axes. Needs gnuplot (Debian: gnuplot-nox); exits 1 with a message
naming the file when the metrics are missing, malformed or hold no steps.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def read_metrics(path):
    train, val = [], []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        sys.exit(f"plot_loss: {path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if "loss" in record:
                train.append((int(record["step"]), float(record["loss"])))
            elif "val_loss" in record:
                val.append((int(record["step"]), float(record["val_loss"])))
        except (ValueError, KeyError, TypeError) as e:
            sys.exit(f"plot_loss: {path}:{number}: not a metrics line ({e})")
    if not train:
        sys.exit(f"plot_loss: {path}: no training steps")
    return train, val


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics")
    parser.add_argument("png")
    parser.add_argument("--title", default="dsrun training loss")
    args = parser.parse_args()
    if shutil.which("gnuplot") is None:
        sys.exit("plot_loss: gnuplot not found (Debian package gnuplot-nox; scripts/install-deps.sh installs it)")
    train, val = read_metrics(args.metrics)
    with tempfile.TemporaryDirectory() as tmp:
        train_dat, val_dat = Path(tmp) / "train.dat", Path(tmp) / "val.dat"
        train_dat.write_text("".join(f"{s} {l}\n" for s, l in train))
        val_dat.write_text("".join(f"{s} {l}\n" for s, l in val))
        plots = [f"'{train_dat}' using 1:2 with lines lw 1.5 title 'train loss'"]
        if val:
            plots.append(f"'{val_dat}' using 1:2 with linespoints pt 7 ps 1 lw 2 title 'validation loss'")
        title = args.title.replace("\\", "\\\\").replace('"', '\\"')
        script = "\n".join([
            "set terminal pngcairo size 900,540 font 'sans,11'",
            f'set output "{args.png}"',
            f'set title "{title}"',
            "set xlabel 'step'",
            "set ylabel 'loss (nats/token)'",
            "set grid",
            "set key top right",
            "plot " + ", ".join(plots),
        ])
        result = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        if result.returncode != 0:
            sys.exit(f"plot_loss: gnuplot failed: {result.stderr.strip()}")
    print(f"plot_loss: {args.png} ({len(train)} steps, {len(val)} validation passes)")


if __name__ == "__main__":
    main()
