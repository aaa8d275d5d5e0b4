#!/usr/bin/env python3
"""Compares two fixture folders written by make_hf_fixtures.py (e.g. the committed ones, made on the
GPU machine, against a run elsewhere): weights (all but the balancing biases, which come from a
forward pass), tokens and generations must be identical; balancing biases, logits, loss and
gradients are reported as differences. Exit 1 on a mismatch beyond fp32 noise."""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main(a_root, b_root):
    bad = 0
    for name in sorted(os.listdir(a_root)):
        a, b = os.path.join(a_root, name), os.path.join(b_root, name)
        if not os.path.isdir(a):
            continue
        wa, wb = load_file(f"{a}/model.safetensors"), load_file(f"{b}/model.safetensors")
        # balancing biases are set from a forward pass (make_hf_fixtures.balance), so another torch
        # build moves them by float noise; every other weight comes straight from the seeded RNG
        same_w = wa.keys() == wb.keys() and all(
            np.array_equal(wa[k], wb[k]) for k in wa if "balancing_biases" not in k)
        bal = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa if "balancing_biases" in k)
        same_t = np.array_equal(np.load(f"{a}/tokens.npy"), np.load(f"{b}/tokens.npy"))
        same_g = np.array_equal(np.load(f"{a}/greedy.npy"), np.load(f"{b}/greedy.npy"))
        la, lb = (json.load(open(f"{x}/reference.json"))["loss"] for x in (a, b))
        lo = rel(np.load(f"{a}/logits.npy"), np.load(f"{b}/logits.npy"))
        ga, gb = load_file(f"{a}/grads.safetensors"), load_file(f"{b}/grads.safetensors")
        gr = max(rel(ga[k], gb[k]) for k in ga)
        print(f"{name}: weights {'same' if same_w else 'DIFFER'}, tokens {'same' if same_t else 'DIFFER'}, "
              f"greedy {'same' if same_g else 'DIFFER'}, balancing biases max diff {bal:.1e}, loss diff {abs(la - lb):.2e}, "
              f"logits rel {lo:.2e}, worst grad rel {gr:.2e}")
        bad |= not (same_w and same_t and same_g) or bal > 1e-5 or abs(la - lb) > 1e-5
        bad |= lo > 1e-5 or gr > 1e-4
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
