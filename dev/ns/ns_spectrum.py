#!/usr/bin/env python3
"""How far Muon's Newton-Schulz gets with 4 iterations against 5, by width (a numerical note for
docs/gpu-plan.md item 7; pure Python, no matrices).

Muon normalises the momentum X by its Frobenius norm and applies the quintic
f(s) = a s + b s^3 + c s^5 (a, b, c = 3.4445, -4.7750, 2.0315) to every singular value, k times
(in exact arithmetic; zayac's bf16 products add noise on top). The singular vectors do not change,
so the k = 4 and k = 5 updates differ only through f^4(s) against f^5(s), and how much that
matters depends on the sizes s of the normalised singular values: the wider the matrix, the
smaller they are (a flat spectrum of m values has s = 1 / sqrt(m)).

Printed: the smallest normalised singular value that reaches 0.5 after k iterations; then, for
spectra s_i ~ i^-alpha over the m = min(rows, cols) singular values (normalised to unit Frobenius
norm), at the tiny model's width (128) and bench-small's (1024), the share of singular values
left below 0.5 by 4 and 5 iterations, and each update's relative distance to the exact
orthogonalisation U V^T: ||Y - U V^T||_F / ||U V^T||_F = sqrt(mean over i of (f^k(s_i) - 1)^2).
(The distance between the 4- and 5-iteration updates themselves is large even where both are
good: the quintic does not converge, it keeps every value oscillating in about [0.7, 1.2].)
Usage: python3 dev/ns/ns_spectrum.py
"""
import math

A, B, C = 3.4445, -4.7750, 2.0315


def f(s, k):
    for _ in range(k):
        s = A * s + B * s ** 3 + C * s ** 5
    return s


def threshold(k, target=0.5):
    """Smallest s in (1e-9, 1) with f^k(s) >= target (f^k rises monotonically below the plateau)."""
    lo, hi = math.log(1e-9), 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(math.exp(mid), k) >= target:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def spectrum(m, alpha):
    s = [(i + 1) ** -alpha for i in range(m)]
    norm = math.sqrt(sum(x * x for x in s))
    return [x / norm for x in s]


def main():
    print("| iterations | smallest normalised singular value reaching 0.5 |")
    print("|---|---|")
    for k in (3, 4, 5, 6):
        print(f"| {k} | {threshold(k):.5f} |")
    print()
    print("| spectrum | m | below 0.5 after 4 | after 5 | distance to U V^T after 4 | after 5 |")
    print("|---|---|---|---|---|---|")
    for alpha in (0.0, 0.5, 0.75, 1.0):
        for m in (128, 1024, 2048):
            s = spectrum(m, alpha)
            y4 = [f(x, 4) for x in s]
            y5 = [f(x, 5) for x in s]
            low4 = sum(1 for y in y4 if y < 0.5) / m
            low5 = sum(1 for y in y5 if y < 0.5) / m
            d4 = math.sqrt(sum((y - 1) ** 2 for y in y4) / m)
            d5 = math.sqrt(sum((y - 1) ** 2 for y in y5) / m)
            name = "flat" if alpha == 0 else f"s_i ~ i^-{alpha}"
            print(f"| {name} | {m} | {100 * low4:.1f}% | {100 * low5:.1f}% | {d4:.3f} | {d5:.3f} |")


if __name__ == "__main__":
    main()
