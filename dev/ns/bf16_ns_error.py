#!/usr/bin/env python3
"""How far Newton-Schulz with every stored matrix rounded to bf16 (fp32 products) lands from the
same iteration in float64, per coefficient set and start, on test_cuda_optim's matrix shapes.

Why: test_cuda_optim holds the GPU's Muon update within 0.08 relative L2 of the CPU's, and four
minimax iterations from AOL's start are over it on one of its matrices. Minimax's first
polynomial is steep where AOL moves the singular values (p' = -6.2 at 0.7, 15.8 at 1), so the
rounding of X, A and B is amplified there. The emulation is the GPU's path in outline, not its
exact rounding sequence: it puts the 1 x 9 row over 0.08 without AOL, where the GPU passes.

The emulated path is the GPU's in outline (ops in optim_cuda.cu): X = bf16(u / ||u||); per step
A = bf16(X X^T), B = bf16(c A A + b A), X' = bf16(B X + a X); with AOL on the first step
A~ = bf16(D A D), B = bf16(c A~ A~ + b A~ + a I) (a I inside the one rounding, as the SYRK does),
X' = bf16(bf16(B D) X). Tall matrices iterate on the transpose. Gaussian inputs, seeded.
Usage: python3 dev/ns/bf16_ns_error.py [trials]   (needs numpy)"""
import sys

import numpy as np

FIXED = [[3.4445, -4.7750, 2.0315]] * 5
# ns_coefficients(ZY_NS_MINIMAX, 4) (src/optim/ns_coef.c), printed from the library
MINIMAX4 = [[7.995293, -21.432545, 14.411265], [3.878371, -2.621783, 0.449121],
            [3.445589, -2.349707, 0.423159], [2.552940, -1.745328, 0.367667]]
SHAPES = [(24, 40), (48, 16), (12, 5), (3, 13), (16, 24), (32, 32), (1, 9)]  # test_cuda_optim's


def bf16(x):
    """Round to nearest even bf16, returned as float64."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def newton_schulz(u, coefs, aol, rounded):
    rnd = bf16 if rounded else (lambda x: np.asarray(x, dtype=np.float64))
    tall = u.shape[0] > u.shape[1]
    x = u.T if tall else u
    x = rnd(x / (np.linalg.norm(x) + 1e-7))
    for k, (a, b, c) in enumerate(coefs):
        g = rnd(x @ x.T)
        if aol and k == 0:
            s = np.abs(g).sum(1)
            d = np.where(s > 0, 1 / np.sqrt(np.where(s > 0, s, 1)), 0)
            g = rnd(d[:, None] * g * d[None, :])
            p = rnd(c * (g @ g) + b * g + a * np.eye(len(g)))
            x = rnd(rnd(p * d[None, :]) @ x)
        else:
            x = rnd(rnd(c * (g @ g) + b * g) @ x + a * x)
    return x.T if tall else x


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rng = np.random.default_rng(0)
    runs = [("5 fixed", FIXED, 0), ("3 fixed, AOL", FIXED[:3], 1), ("5 fixed, AOL", FIXED, 1),
            ("4 minimax", MINIMAX4, 0), ("4 minimax, AOL", MINIMAX4, 1)]
    print("| iteration | " + " | ".join(f"{r} x {c}" for r, c in SHAPES) + " |")
    print("|---" * (len(SHAPES) + 1) + "|")
    for name, coefs, aol in runs:
        cells = []
        for shape in SHAPES:
            err = []
            for _ in range(trials):
                u = rng.standard_normal(shape)
                ref = newton_schulz(u, coefs, aol, False)
                got = newton_schulz(u, coefs, aol, True)
                err.append(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            cells.append(f"{np.median(err):.3f} / {max(err):.3f} / {np.mean(np.array(err) > 0.08):.0%}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"(relative L2 of the bf16 emulation against float64 over {trials} Gaussian inputs per "
          "shape: median / worst / share over test_cuda_optim's 0.08)")


if __name__ == "__main__":
    main()
