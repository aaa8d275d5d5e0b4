#!/usr/bin/env python3
"""What the other kernels do while NCCL's run, from dev/trace/kernel_trace.c's files (one per process).

For each file: the NCCL kernels' time (the union of their intervals, over the last part of the
run, after warm-up), how much of it the other kernels fill, how long the same kernels take inside
and outside NCCL's intervals, how long after the host submitted them they start, and which
hardware channels each side used; with --api, where the host's time goes (its CUDA runtime calls).
Usage: kernel_trace_summary.py [--tail 0.4] [--kernels N] [--api FILE.api.tsv] FILE..."""
import argparse
import bisect
import collections
import statistics


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("start\t"):
                continue
            p = line.rstrip("\n").split("\t", 9)
            if len(p) < 10:
                continue
            s, e, q, sub, stream, chan, grid, block, cl = map(int, p[:9])
            rows.append(dict(s=s, e=e, q=q, sub=sub, stream=stream, chan=chan, grid=grid,
                             block=block, cluster=cl, name=p[9]))
    return rows


def union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(s, e, u):
    return sum(max(0, min(e, b) - max(s, a)) for a, b in u)


def short(name):
    return name if len(name) <= 70 else name[:67] + "..."


def summary(path, tail):
    rows = load(path)
    if not rows:
        print(f"{path}: no kernels")
        return
    nccl = [r for r in rows if "nccl" in r["name"].lower()]
    t0 = min(r["s"] for r in rows)
    t1 = max(r["e"] for r in rows)
    cut = t1 - tail * (t1 - t0)
    rows = [r for r in rows if r["s"] >= cut]
    nccl = [r for r in rows if "nccl" in r["name"].lower()]
    comp = [r for r in rows if "nccl" not in r["name"].lower()]
    nu = union([(r["s"], r["e"]) for r in nccl])
    cu = union([(r["s"], r["e"]) for r in comp])
    print(f"== {path}")
    step_accounting(rows, nu, cu, 14)
    if not nccl:
        return
    n_time = sum(b - a for a, b in nu)
    filled = sum(overlap(a, b, cu) for a, b in nu)
    span = max(r["e"] for r in rows) - min(r["s"] for r in rows)
    busy_out = sum(b - a for a, b in cu) - filled
    print(f"== {path}: last {tail:.0%} of the run, {span / 1e6:.1f} ms, {len(nccl)} NCCL kernels, "
          f"{len(comp)} others")
    print(f"NCCL kernels run {n_time / 1e6:.2f} ms; other kernels run during {filled / n_time:.1%} "
          f"of it; outside NCCL the others fill {busy_out / max(1, span - n_time):.1%} of the time")
    ngrid = collections.Counter((r["grid"], r["block"], r["cluster"]) for r in nccl)
    print("NCCL launch shapes (grid, block, cluster): "
          + ", ".join(f"{k} x{v}" for k, v in ngrid.most_common(4)))
    print(f"hardware channels: NCCL {sorted({r['chan'] for r in nccl})}, others "
          f"{sorted({r['chan'] for r in comp})}; streams NCCL {sorted({r['stream'] for r in nccl})}")
    inside = collections.defaultdict(list)
    outside = collections.defaultdict(list)
    lag_in, lag_out = [], []
    for r in comp:
        d = r["e"] - r["s"]
        f = overlap(r["s"], r["e"], nu) / max(1, d)
        lag = (r["s"] - r["sub"]) / 1e3 if r["sub"] else None
        if f > 0.5:
            inside[r["name"]].append(d)
            if lag is not None:
                lag_in.append(lag)
        elif f == 0:
            outside[r["name"]].append(d)
            if lag is not None:
                lag_out.append(lag)
    if lag_in and lag_out:
        print(f"start - submitted (us, median): during NCCL {statistics.median(lag_in):.1f}, "
              f"outside {statistics.median(lag_out):.1f}")
    total = collections.Counter()
    for r in comp:
        total[r["name"]] += r["e"] - r["s"]
    print("| kernel | n outside | mean us outside | n during NCCL | mean us during | ratio |")
    print("|---|---|---|---|---|---|")
    for name, _ in total.most_common(12):
        o, i = outside.get(name, []), inside.get(name, [])
        mo = statistics.mean(o) / 1e3 if o else float("nan")
        mi = statistics.mean(i) / 1e3 if i else float("nan")
        print(f"| {short(name)} | {len(o)} | {mo:.1f} | {len(i)} | {mi:.1f} | {mi / mo:.2f} |")


def step_accounting(rows, nu, cu, top):
    """Per optimizer step: where the time goes (compute, NCCL alone, idle), and the idle gaps."""
    # the gradient norm's last kernel runs once a step (clipping)
    steps = sum(1 for r in rows if "sum_final_kernel" in r["name"]) or 1
    t0 = min(r["s"] for r in rows)
    t1 = max(r["e"] for r in rows)
    busy = union([(a, b) for a, b in nu] + [(a, b) for a, b in cu])
    comp_busy = sum(b - a for a, b in cu)
    nccl_only = sum(b - a for a, b in busy) - comp_busy
    kernel_sum = sum(r["e"] - r["s"] for r in rows if "nccl" not in r["name"].lower())
    idle = (t1 - t0) - sum(b - a for a, b in busy)
    per = lambda x: x / steps / 1e6
    print(f"per step ({steps} in the window): span {per(t1 - t0):.2f} ms, compute "
          f"busy {per(comp_busy):.2f} (kernel time summed {per(kernel_sum):.2f}), NCCL alone "
          f"{per(nccl_only):.2f}, nothing {per(idle):.2f}")
    # gaps with no compute kernel on any stream (between the union's intervals), keyed by the
    # kernel that ended last before the gap and the first to start after it; "host" where the host
    # launched that one (CUPTI's queued) only after the gap began, "driver" where it was launched
    # before but its command buffer reached the GPU (submitted) after, else "queued" (it waited
    # for a dependency: an event, a stream, a memcpy)
    comp = [r for r in rows if "nccl" not in r["name"].lower()]
    by_end = sorted(comp, key=lambda r: r["e"])
    by_start = sorted(comp, key=lambda r: r["s"])
    ends = [r["e"] for r in by_end]
    starts = [r["s"] for r in by_start]
    gaps = collections.defaultdict(lambda: [0, 0])
    for (a0, a1), (b0, b1) in zip(cu, cu[1:]):
        if b0 - a1 <= 10_000:  # over 10 us without compute
            continue
        a = by_end[bisect.bisect_right(ends, a1) - 1]
        b = by_start[bisect.bisect_left(starts, b0)]
        during = overlap(a1, b0, nu)
        why = ("host" if b["q"] and b["q"] > a1 else
               "driver" if b["sub"] and b["sub"] > a1 else "queued")
        key = (short(a["name"])[:40], short(b["name"])[:40],
               ("NCCL, " if during > 0 else "idle, ") + why)
        gaps[key][0] += 1
        gaps[key][1] += b0 - a1
    print(f"| compute gaps > 10 us, after | before | meanwhile, next kernel | per step | ms per step |")
    print("|---|---|---|---|---|")
    for k, (n, t) in sorted(gaps.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {k[0]} | {k[1]} | {k[2]} | {n / steps:.1f} | {t / steps / 1e6:.3f} |")


def timeline(path, min_us):
    """One step (between the last two but one gradient-norm kernels) as events: the NCCL kernels
    longer than min_us, the compute gaps longer than min_us, and a few landmark kernels."""
    rows = sorted(load(path), key=lambda r: r["s"])
    marks = [r["s"] for r in rows if "sum_final_kernel" in r["name"]]
    if len(marks) < 3:
        print(f"{path}: fewer than 3 steps")
        return
    a, b = marks[-3], marks[-2]
    step = [r for r in rows if a <= r["s"] < b]
    comp = [r for r in step if "nccl" not in r["name"].lower()]
    ev = []
    for r in step:
        if "nccl" in r["name"].lower() and r["e"] - r["s"] > min_us * 1e3:
            ev.append((r["s"], f"NCCL {short(r['name'])[:48]} {(r['e'] - r['s']) / 1e6:.2f} ms"))
    for x, y in zip(comp, comp[1:]):
        if y["s"] - x["e"] > min_us * 1e3:
            ev.append((x["e"], f"   no compute for {(y['s'] - x['e']) / 1e6:.2f} ms after "
                               f"{short(x['name'])[:36]}, before {short(y['name'])[:36]}"))
    for key in ("xent_rows", "embed_seg_finish", "adamw", "muon_apply", "sumsq", "embed_fwd"):
        for r in comp:
            if key in r["name"]:
                ev.append((r["s"], f"      {key} {(r['e'] - r['s']) / 1e6:.2f} ms"))
    print(f"== {path}: one step, {(b - a) / 1e6:.2f} ms")
    for t, text in sorted(ev):
        print(f"{(t - a) / 1e6:8.2f} {text}")


def kernel_table(path, tail, top):
    """Per step, the kernels that take the most GPU time: calls, mean and total time, grid."""
    rows = load(path)
    if not rows:
        return
    t0, t1 = min(r["s"] for r in rows), max(r["e"] for r in rows)
    rows = [r for r in rows if r["s"] >= t1 - tail * (t1 - t0)]
    steps = sum(1 for r in rows if "sum_final_kernel" in r["name"]) or 1
    by = collections.defaultdict(lambda: [0, 0, set()])
    for r in rows:
        k = by[short(r["name"])]
        k[0] += 1
        k[1] += r["e"] - r["s"]
        k[2].add(r["grid"])
    total = sum(v[1] for v in by.values())
    print(f"== {path}: kernels by time, {steps} steps, {total / steps / 1e6:.2f} ms of kernel "
          f"time a step (all streams)")
    print("| kernel | calls/step | mean us | ms/step | % | grids |")
    print("|---|---|---|---|---|---|")
    for name, (n, t, grids) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        g = ",".join(str(x) for x in sorted(grids)[:3]) + ("..." if len(grids) > 3 else "")
        print(f"| {name} | {n / steps:.1f} | {t / n / 1e3:.1f} | {t / steps / 1e6:.3f} | "
              f"{100 * t / total:.1f} | {g} |")


def api_table(path, api_path, top, block_ms=1.0):
    """The host's CUDA runtime calls per step (kernel_trace.c's .api.tsv, ZYTRACE_API=1): time by
    call, and the calls that held the host over block_ms (a copy to or from pageable memory
    waits for the stream, as a synchronize does). Steps start where the host queued embed_fwd_k."""
    starts = sorted(r["q"] for r in load(path) if "embed_fwd_k" in r["name"])
    calls = []
    with open(api_path) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) == 4 and p[0].isdigit() and p[3].startswith("cuda"):
                calls.append((int(p[0]), int(p[1]), p[3]))
    calls.sort()
    lo, hi = len(starts) // 3, len(starts) - 1 # after the warm-up, whole steps only
    if hi - lo < 1:
        print(f"{api_path}: fewer than two whole steps")
        return
    a, b, steps = starts[lo], starts[hi], hi - lo
    by, n = collections.Counter(), collections.Counter()
    for s, e, name in calls:
        if a <= s < b:
            by[name] += e - s
            n[name] += 1
    print(f"== {api_path}: the host's CUDA runtime calls, {steps} steps "
          f"({(b - a) / steps / 1e6:.2f} ms a step on the host)")
    print("| call | calls/step | mean us | ms/step |")
    print("|---|---|---|---|")
    for name, t in by.most_common(top):
        print(f"| {name} | {n[name] / steps:.1f} | {t / n[name] / 1e3:.2f} | {t / steps / 1e6:.3f} |")
    step0 = starts[lo + 1] if lo + 1 < hi else a
    step1 = starts[lo + 2] if lo + 2 <= hi else b
    print(f"calls over {block_ms} ms in one step (offset from its start):")
    for s, e, name in calls:
        if step0 <= s < step1 and e - s > block_ms * 1e6:
            print(f"  at {(s - step0) / 1e6:7.2f} ms: {name} {(e - s) / 1e6:.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tail", type=float, default=0.4)
    ap.add_argument("--timeline", type=float, metavar="US", default=0,
                    help="also print one step's NCCL kernels and compute gaps longer than US us")
    ap.add_argument("--kernels", type=int, metavar="N", default=0,
                    help="also print the N kernels with the most time a step")
    ap.add_argument("--api", metavar="FILE",
                    help="also print the host's runtime calls per step from FILE (.api.tsv)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        summary(f, a.tail)
        if a.timeline > 0:
            timeline(f, a.timeline)
        if a.kernels > 0:
            kernel_table(f, a.tail, a.kernels)
        if a.api:
            api_table(f, a.api, a.kernels or 12)


if __name__ == "__main__":
    main()
