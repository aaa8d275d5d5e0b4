#!/usr/bin/env python3
"""The account of a supervised drill (scripts/supervise_drill.sh, scripts/gpu_supervise_drill.sh),
from what `zayac supervise` and the runs wrote: the incidents and the summary as they are, one
table row per incident (the fault injected, where, how it was detected, how long detection and
recovery took, the steps redone), the totals, and the worst relative loss difference against the
same run undisturbed. Exits 1 when the supervised run's losses do not cover every step.

Usage: supervise_report.py SUPERVISED_OUT UNDISTURBED_OUT STEPS [TABLE.md]
"""
import json
import sys


def losses(out):
    """step -> loss, the last row of a step winning (a restart writes the steps it redoes again)."""
    rows = {}
    with open(f"{out}/metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            if "loss" in row:
                rows[row["step"]] = row["loss"]
    return rows


def how(inc):
    """How the supervisor knew: the signal it saw, shortened to a table cell."""
    kind, status, detail = inc["kind"], inc.get("status"), inc.get("detail") or ""
    detail = detail.replace("zayac train: ", "").replace("|", "/")
    if kind == "crash":
        return f"run ended by signal {status - 128} (status {status})"
    if kind == "hang":
        return "no heartbeat for --hang-timeout (" + detail.split(";")[0] + ")"
    if kind == "loss-spike":
        spike = detail[detail.find("loss spike"):].replace(": training diverged", "")
        return spike
    if kind == "divergence":
        return "non-finite loss or gradient norm, exit 1"
    if kind == "corrupt-checkpoint":
        return "the restart's checkpoint verification failed; an older one was used"
    if kind == "exit":  # the error's last clause says what failed; a bare fault line says nothing
        last = "" if detail.startswith("ZAYAC_FAULT") else detail.rsplit(": ", 1)[-1]
        return f"exit status {status}" + (": " + last if last else "")
    return detail[:100]


def cell(x, fmt="%.2f"):
    return "" if x is None else fmt % x


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    run, ref, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(f"{run}/incidents.jsonl") as f:
        incidents = [json.loads(line) for line in f if line.strip()]
    with open(f"{run}/summary.json") as f:
        summary = json.load(f)
    print(f"== {run}/incidents.jsonl")
    for inc in incidents:
        print(json.dumps(inc))
    print(f"== {run}/summary.json")
    print(json.dumps(summary, indent=1))
    lines = [
        "| fault injected | incident | step | rank | detected how | detected after (s) | "
        "downtime (s) | steps redone | resumed from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for inc in incidents:
        fault = inc.get("fault")
        if not fault and inc["kind"] == "corrupt-checkpoint":
            fault = f"corrupt-checkpoint (checkpoint of step {inc['step']})"
        lines.append("| %s | %s, %s | %s | %s | %s | %s | %s | %s | %s |" % (
            fault or "(none)", inc["kind"], inc["action"], cell(inc.get("step"), "%d"),
            cell(inc.get("rank"), "%d"), how(inc), cell(inc.get("detected_after_s")),
            cell(inc.get("downtime_s")), cell(inc.get("steps_redone"), "%d"),
            cell(inc.get("resumed_from_step"), "%d")))
    a, b = losses(run), losses(ref)
    common = sorted(set(a) & set(b))
    worst = max((abs(a[s] - b[s]) / abs(b[s]) for s in common), default=float("nan"))
    totals = [
        f"exit status {summary['exit_status']}; {summary['incidents']} incidents, "
        f"{summary['restarts']} restarts, total downtime {summary['downtime_s']:.2f} s, "
        f"{summary['steps_redone']} steps redone",
        f"wall {summary['wall_s']:.1f} s, useful training {summary['useful_s']:.1f} s: "
        f"goodput {summary['goodput']:.3f}",
        f"losses: {len(a)} of {steps} steps trained, {len(common)} compared with the undisturbed "
        f"run: worst relative difference {worst:.3g}",
    ]
    table = "\n".join(lines + [""] + totals)
    print("== the drill")
    print(table)
    if len(sys.argv) == 5:
        with open(sys.argv[4], "w") as f:
            f.write(table + "\n")
    if len(a) != steps or len(b) != steps:
        print(f"FAILED: {len(a)} supervised and {len(b)} undisturbed steps, expected {steps}")
        sys.exit(1)


if __name__ == "__main__":
    main()
