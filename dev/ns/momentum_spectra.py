#!/usr/bin/env python3
"""The singular-value spectra of Muon's momenta in a zayac checkpoint, and what 4 and 5 Newton-Schulz
iterations do with them (dev/ns/ns_spectrum.py's quintic). Pure Python (Jacobi on the Gram
matrix), so for the tiny model's 128-256-wide matrices; a stacked tensor (the experts) gives its
first matrix. Printed per matrix of the layer: the decay exponent alpha of s_i ~ i^-alpha (a
least-squares fit over i in [2, m/2]), the largest and smallest normalised singular value, and
the share left below 0.5 after 4 and 5 iterations; then the same from AOL's start (D X with
d_i = (sum_j |(X X^T)_ij|)^-1/2, optimizer.ns_precondition aol: its singular values need no
normalisation) against the Frobenius start at 3 iterations.
Usage: python3 dev/ns/momentum_spectra.py CHECKPOINT_DIR/train/train_state.rank_0.safetensors [LAYER]
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ns_spectrum import f  # noqa: E402


def read_header(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + n]), 8 + n


def matrix(raw, base, d):
    """The first [r, c] matrix of an F32 tensor, as rows."""
    r, c = d["shape"][-2], d["shape"][-1]
    a = d["data_offsets"][0]
    v = struct.unpack("<%df" % (r * c), raw[base + a : base + a + 4 * r * c])
    return [list(v[i * c : (i + 1) * c]) for i in range(r)], r, c


def jacobi(g, vectors=False):
    """Eigenvalues of a symmetric matrix by cyclic Jacobi rotations, and with vectors=True its
    eigenvectors too (the columns of V): (values, V), in the rotations' order."""
    n = len(g)
    a = [row[:] for row in g]
    v = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)] if vectors else None
    for _ in range(30):
        off = sum(a[i][j] ** 2 for i in range(n) for j in range(n) if i != j)
        if off < (1e-22 if vectors else 1e-18) * sum(a[i][i] ** 2 for i in range(n)):
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = a[p][q]
                if abs(apq) < 1e-30:
                    continue
                th = (a[q][q] - a[p][p]) / (2 * apq)
                t = (1 if th >= 0 else -1) / (abs(th) + math.sqrt(th * th + 1))
                cs = 1 / math.sqrt(t * t + 1)
                sn = t * cs
                for k in range(n):
                    akp, akq = a[k][p], a[k][q]
                    a[k][p], a[k][q] = cs * akp - sn * akq, sn * akp + cs * akq
                for k in range(n):
                    apk, aqk = a[p][k], a[q][k]
                    a[p][k], a[q][k] = cs * apk - sn * aqk, sn * apk + cs * aqk
                if vectors:
                    for k in range(n):
                        vkp, vkq = v[k][p], v[k][q]
                        v[k][p], v[k][q] = cs * vkp - sn * vkq, sn * vkp + cs * vkq
    return [a[i][i] for i in range(n)], v


def eig_sym(g):
    """Eigenvalues of a symmetric matrix, largest first."""
    return sorted(jacobi(g)[0], reverse=True)


def gram(x):
    """X X^T of a matrix given as rows."""
    return [[sum(a * b for a, b in zip(x[i], x[j])) for j in range(len(x))] for i in range(len(x))]


def aol_gram(g):
    """AOL's factors d_i = (sum_j |G_ij|)^-1/2 of a Gram matrix G, and D G D."""
    n = len(g)
    d = [1 / math.sqrt(sum(abs(t) for t in g[i])) for i in range(n)]
    return d, [[d[i] * g[i][j] * d[j] for j in range(n)] for i in range(n)]


def layer_momenta(argv):
    """(name, X, r, c) for each Muon momentum of the layer argv names (argv[1] the checkpoint's
    train_state file, argv[2] the layer, default 1), X as r <= c rows (tall ones transposed),
    skipping the router's narrow matrices (under 64 on a side: too few values to fit a decay)."""
    layer = argv[2] if len(argv) > 2 else "1"
    raw = open(argv[1], "rb").read()
    h, base = read_header(raw)
    prefix = "muon_momentum.model.layers.%s." % layer
    for k in sorted(x for x in h if x.startswith(prefix)):
        m, r, c = matrix(raw, base, h[k])
        if min(r, c) < 64:
            continue
        if r > c:
            m, r, c = [list(x) for x in zip(*m)], c, r
        yield k[len(prefix):], m, r, c


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows, aol_rows = [], []
    for name, m, r, c in layer_momenta(sys.argv):
        g = gram(m)
        sv = [math.sqrt(max(e, 0.0)) for e in eig_sym(g)]
        fro = math.sqrt(sum(x * x for x in sv))
        s = [x / fro for x in sv]
        xs = [math.log(i + 1) for i in range(1, r // 2)]
        ys = [math.log(max(s[i], 1e-30)) for i in range(1, r // 2)]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
        low4 = sum(1 for x in s if f(x, 4) < 0.5) / r
        low5 = sum(1 for x in s if f(x, 5) < 0.5) / r
        rows.append(f"| {name} | {r} x {c} | {-slope:.2f} | {s[0]:.3f} | {s[-1]:.5f} | "
                    f"{100 * low4:.1f}% | {100 * low5:.1f}% |")
        _, ga = aol_gram(g)
        sa = [math.sqrt(max(e, 0.0)) for e in eig_sym(ga)]
        low3 = sum(1 for x in s if f(x, 3) < 0.5) / r
        low3a = sum(1 for x in sa if f(x, 3) < 0.5) / r
        aol_rows.append(f"| {name} | {s[0]:.3f} .. {s[-1]:.5f} | {sa[0]:.3f} .. "
                        f"{sa[-1]:.5f} | {100 * low3:.1f}% | {100 * low3a:.1f}% |")
    print("| matrix | shape | alpha | s_max | s_min | below 0.5 after 4 | after 5 |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| matrix | Frobenius start, s_max .. s_min | AOL start | below 0.5 after 3, Frobenius "
          "| after 3, AOL |")
    print("|---|---|---|---|---|")
    print("\n".join(aol_rows))


if __name__ == "__main__":
    main()
