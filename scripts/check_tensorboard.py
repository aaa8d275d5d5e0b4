#!/usr/bin/env python3
"""Checks zayac's TensorBoard event files with TensorBoard's own readers (pip install tensorboard).

usage: python3 scripts/check_tensorboard.py [METRICS_DIR]

Without a folder: compiles a small writer against build/libzayac.a (run `make` first), has it log
known scalars through src/train/metrics.c into a temporary folder, and checks what TensorBoard reads
against the same formulas computed here. With a folder: checks every event file in it against the
metrics.jsonl beside it. Either way each event file is read three ways: the TFRecord reader (which
verifies both masked CRC-32Cs of every record), the Event protobuf parser, and EventAccumulator.
Exits non-zero with a message on the first mismatch.
"""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITER_C = r"""
#include "train/metrics.h"
#include "base/err.h"
#include <math.h>
#include <stdio.h>
int main(int argc, char **argv) {
    zy_metrics *m;
    if (metrics_open(&m, argv[1]) != ZY_OK) { fprintf(stderr, "%s\n", zy_errmsg()); return 1; }
    for (int s = 0; s < 100; s++) {
        metrics_scalar(m, "loss", s, s == 50 ? NAN : 3 + 8 * exp(-s / 30.0));
        metrics_scalar(m, "grad_norm", s, 1.0 / (1 + s));
        metrics_scalar(m, "lr", s, 1e-4 * (s < 10 ? s / 10.0 : 1.0));
        metrics_scalar(m, "moe/layer0/expert_load_max", s, 0.1 + 0.001 * s);
        if (s % 25 == 0) metrics_scalar(m, "val_loss", s, 3.5 + 8 * exp(-s / 30.0));
        if (metrics_flush(m) != ZY_OK) { fprintf(stderr, "%s\n", zy_errmsg()); return 1; }
    }
    if (metrics_close(m) != ZY_OK) { fprintf(stderr, "%s\n", zy_errmsg()); return 1; }
    return 0;
}
"""


def expected_scalars():
    """The writer's values, rounded to float32 as TensorBoard stores them."""
    f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
    want = {}
    for s in range(100):
        want[("loss", s)] = math.nan if s == 50 else f32(3 + 8 * math.exp(-s / 30.0))
        want[("grad_norm", s)] = f32(1.0 / (1 + s))
        want[("lr", s)] = f32(1e-4 * (s / 10.0 if s < 10 else 1.0))
        want[("moe/layer0/expert_load_max", s)] = f32(0.1 + 0.001 * s)
        if s % 25 == 0:
            want[("val_loss", s)] = f32(3.5 + 8 * math.exp(-s / 30.0))
    return want


def fail(msg):
    sys.exit("check_tensorboard: FAILED: " + msg)


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def read_records(path):
    """Every record's Event, through TensorBoard's TFRecord reader (CRCs checked there)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path.encode(), 0, b"", None)
    events = []
    while True:
        try:
            reader.GetNext()
        except pywrap_tensorflow.errors.OutOfRangeError:
            break
        except pywrap_tensorflow.errors.DataLossError as e:
            msg = e.message.decode() if isinstance(e.message, bytes) else e.message
            fail(f"record {len(events)}: {msg}")
        events.append(event_pb2.Event.FromString(reader.record()))
    return events


def check_event_file(path):
    """Checks one file; returns {(tag, step): value} as EventAccumulator read it."""
    events = read_records(path)
    if not events:
        fail(f"{path}: no records")
    if events[0].file_version != "brain.Event:2":
        fail(f"{path}: first record has file_version {events[0].file_version!r}")
    raw = {}
    for e in events[1:]:
        if not e.HasField("summary"):
            fail(f"{path}: record at step {e.step} has no summary")
        for v in e.summary.value:
            if v.WhichOneof("value") != "simple_value":
                fail(f"{path}: tag {v.tag} is not a simple_value")
            raw[(v.tag, e.step)] = v.simple_value

    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    if acc.file_version != 2.0:
        fail(f"{path}: EventAccumulator file_version {acc.file_version}")
    got = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            got[(tag, ev.step)] = ev.value
    if set(got) != set(raw):
        fail(f"{path}: EventAccumulator and the raw records disagree on (tag, step) pairs")
    for k, v in raw.items():
        if not same(v, got[k]):
            fail(f"{path}: {k}: raw {v} vs EventAccumulator {got[k]}")
    return got


def check_folder(folder, want=None):
    files = sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*")))
    if not files:
        fail(f"{folder}: no event files")
    got = {}
    for f in files:
        got.update(check_event_file(f))
        print(f"  {os.path.basename(f)}: records parsed, CRCs good")
    jsonl = os.path.join(folder, "metrics.jsonl")
    rows = 0
    with open(jsonl) as fh:
        for line in fh:
            row = json.loads(line)
            rows += 1
            step = row["step"]
            for tag, v in row.items():
                if tag in ("step", "wall_time"):
                    continue
                tv = got.get((tag, step))
                if tv is None:
                    fail(f"{jsonl}: {tag} at step {step} missing from the event files")
                jv = math.nan if v is None else struct.unpack("<f", struct.pack("<f", v))[0]
                if not (same(jv, tv) or (v is None and math.isinf(tv))):
                    fail(f"{jsonl}: {tag} at step {step}: JSONL {v} vs TensorBoard {tv}")
    if want is not None:
        if set(want) != set(got):
            fail(f"tags/steps differ: missing {sorted(set(want) - set(got))[:5]}, "
                 f"extra {sorted(set(got) - set(want))[:5]}")
        for k, v in want.items():
            if not same(v, got[k]):
                fail(f"{k}: expected {v}, TensorBoard read {got[k]}")
    tags = sorted({t for t, _ in got})
    print(f"  {len(got)} scalars over {len(tags)} tags ({', '.join(tags)}); {rows} JSONL rows agree")


def main():
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    if len(sys.argv) == 2:
        check_folder(sys.argv[1])
        print("check_tensorboard: OK")
        return
    lib = os.path.join(ROOT, "build", "libzayac.a")
    if not os.path.exists(lib):
        fail(f"{lib} not found: run make first")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe, out = (os.path.join(tmp, n) for n in ("w.c", "w", "metrics"))
        with open(src, "w") as fh:
            fh.write(WRITER_C)
        subprocess.run(["gcc", "-std=c11", "-I", os.path.join(ROOT, "src"), src, lib, "-lcjson",
                        "-lm", "-lpthread", "-fopenmp", "-o", exe], check=True)
        subprocess.run([exe, out], check=True)
        check_folder(out, expected_scalars())
    print("check_tensorboard: OK")


if __name__ == "__main__":
    main()
