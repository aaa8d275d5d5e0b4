#!/usr/bin/env python3
"""Where Newton-Schulz from AOL's start goes, against where Muon means to go, on real momenta (a
numerical note for results/one-gpu-limit/README.md, nineteenth session; pure Python, so for the
tiny model's 128-256-wide matrices).

Muon's target is the orthogonal factor P(X) = (X X^T)^-1/2 X. Newton-Schulz acts on singular values
only, so in exact arithmetic k fixed quintics from the Frobenius start give
V diag(f^k(s_i / ||s||) / s_i) V^T X (X X^T = V diag(s^2) V^T). AOL starts from D X instead
(d_i = (sum_j |(X X^T)_ij|)^-1/2), whose singular vectors differ: its iterations head for P(D X).
Printed per matrix, each as a relative Frobenius distance to P(X): P(D X) itself (how far AOL moves
the target), 5 and 3 Frobenius iterations, 3 and 4 AOL iterations; and the cosine between the
5-iteration update and each other update (the direction the optimizer steps in).
Usage: python3 dev/ns/aol_target.py CHECKPOINT_DIR/train/train_state.rank_0.safetensors [LAYER]
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from momentum_spectra import aol_gram, gram, jacobi, layer_momenta  # noqa: E402
from ns_spectrum import f  # noqa: E402


def spectral_map(x, g, h):
    """V diag(h(s_i)) V^T x for X X^T = g = V diag(s^2) V^T (h(s) = 0 where s is ~0)."""
    lam, v = jacobi(g, vectors=True)
    top = max(lam)
    w = [h(math.sqrt(l)) if l > 1e-14 * top else 0.0 for l in lam]
    n, c = len(x), len(x[0])
    vtx = [[sum(v[k][i] * x[k][j] for k in range(n)) for j in range(c)] for i in range(n)]
    return [[sum(v[i][k] * w[k] * vtx[k][j] for k in range(n)) for j in range(c)] for i in range(n)]


def dist(a, b):
    num = sum((p - q) ** 2 for ra, rb in zip(a, b) for p, q in zip(ra, rb))
    return math.sqrt(num / sum(q * q for rb in b for q in rb))


def cosine(a, b):
    dot = sum(p * q for ra, rb in zip(a, b) for p, q in zip(ra, rb))
    na = math.sqrt(sum(p * p for r in a for p in r))
    nb = math.sqrt(sum(q * q for r in b for q in r))
    return dot / (na * nb)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("| matrix | P(D X) | 5 Frobenius | 3 Frobenius | 3 AOL | 4 AOL | cos(5 F, 3 F) | "
          "cos(5 F, 3 AOL) | cos(5 F, 4 AOL) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, x, r, c in layer_momenta(sys.argv):
        g = gram(x)
        fro = math.sqrt(sum(g[i][i] for i in range(r)))
        d, gd = aol_gram(g)
        dx = [[d[i] * t for t in x[i]] for i in range(r)]
        polar = spectral_map(x, g, lambda s: 1 / s)
        polar_d = spectral_map(dx, gd, lambda s: 1 / s)
        frob = {n: spectral_map(x, g, lambda s, n=n: f(s / fro, n) / s) for n in (3, 5)}
        aol = {n: spectral_map(dx, gd, lambda s, n=n: f(s, n) / s) for n in (3, 4)}
        print(f"| {name} ({r} x {c}) | {dist(polar_d, polar):.3f} | "
              f"{dist(frob[5], polar):.3f} | {dist(frob[3], polar):.3f} | {dist(aol[3], polar):.3f} | "
              f"{dist(aol[4], polar):.3f} | {cosine(frob[5], frob[3]):.3f} | "
              f"{cosine(frob[5], aol[3]):.3f} | {cosine(frob[5], aol[4]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
