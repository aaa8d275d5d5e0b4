#!/usr/bin/env python3
"""Validation-loss curves of several training runs: a markdown table on stdout (and, for labels
"variant, seed N", each variant's mean last loss against the first variant's) and an SVG plot.

usage: val_curves.py OUT.svg "label=path/metrics.jsonl" ...
Reads the metrics.jsonl lines that carry val_loss (zayac train's eval points)."""
import json
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]


def val_points(path):
    pts = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "val_loss" in rec:
                pts.append((rec["step"], rec["val_loss"]))
    return pts


def svg(runs, out, w=720, h=420, pad=60):
    # skip the step-0 point (the untrained loss) so the differences between runs stay visible
    pts = [(s, v) for _, p in runs for s, v in p if s > 0]
    x0, x1 = min(s for s, _ in pts), max(s for s, _ in pts)
    y0, y1 = min(v for _, v in pts), max(v for _, v in pts)
    sx = lambda s: pad + (s - x0) / max(x1 - x0, 1) * (w - 2 * pad)
    sy = lambda v: h - pad - (v - y0) / max(y1 - y0, 1e-9) * (h - 2 * pad)
    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
          f'<rect width="{w}" height="{h}" fill="white"/>',
          f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
          f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
          f'<text x="{w/2}" y="{h-15}" text-anchor="middle">step</text>',
          f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">validation loss</text>']
    for k in range(5):
        v = y0 + (y1 - y0) * k / 4
        el.append(f'<text x="{pad-5}" y="{sy(v)+4:.1f}" text-anchor="end">{v:.3f}</text>')
        s = x0 + (x1 - x0) * k / 4
        el.append(f'<text x="{sx(s):.1f}" y="{h-pad+16}" text-anchor="middle">{s:.0f}</text>')
    for i, (label, p) in enumerate(runs):
        c = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{sx(s):.1f},{sy(v):.1f}" for s, v in p if s > 0)
        el.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        el.append(f'<text x="{w-pad-170}" y="{pad+16*i}" fill="{c}">{label}</text>')
    el.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(el) + "\n")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = []
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        runs.append((label, val_points(path)))
    steps = sorted({s for _, p in runs for s, _ in p})
    print("| run | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|" + "---|" * len(steps))
    for label, p in runs:
        d = dict(p)
        print(f"| {label} | " + " | ".join(f"{d[s]:.4f}" if s in d else "" for s in steps) + " |")
    summary(runs)
    svg(runs, sys.argv[1])


def summary(runs):
    """The last validation loss per variant (a label's part before ", seed"), its mean over the
    seeds and the mean's difference to the first variant's, over the seeds both have."""
    last = {}
    for label, p in runs:
        variant, _, seed = label.partition(", seed ")
        if p:
            last.setdefault(variant, {})[seed] = p[-1][1]
    if len(last) < 2:
        return
    variants = list(last)
    base = last[variants[0]]
    print()
    print(f"| variant | seeds | mean of the last | against {variants[0]}, same seeds |")
    print("|---|---|---|---|")
    for v in variants:
        seeds = sorted(last[v])
        mean = sum(last[v].values()) / len(seeds)
        both = [k for k in seeds if k in base]
        diff = (sum(last[v][k] - base[k] for k in both) / len(both)) if both else None
        print(f"| {v} | {' '.join(seeds)} | {mean:.4f} | "
              + (f"{diff:+.4f}" if diff is not None and v != variants[0] else "") + " |")


if __name__ == "__main__":
    main()
