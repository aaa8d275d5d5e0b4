#!/usr/bin/env bash
# Per-kernel GPU times of `zayac bench train` (bench-small, batch 8 x 2048) through Nsight Compute
# (ncu, which the GPU machine's CUDA has; nsys is not there): every kernel of the run is replayed
# alone and its gpu__time_duration recorded, then summed by kernel name (template arguments cut).
# ncu serialises the kernels, so the sum says where the device time goes, not the step time with
# its overlap. Run it after a build (dev/scripts/gpu_speed.sh builds).
# Usage (from the zayac root, on the GPU machine): OUT=... bash dev/scripts/gpu_kernels.sh
#   BIN=<zayac binary> (default build/zayac), STEPS (default 1 after 1 warm-up step), TOP (40),
#   FILTER=<ncu -k expression> (default: every kernel).
set -u
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/gpu_kernels_out}
mkdir -p "$OUT"
BIN=${BIN:-build/zayac}
kfilter=()
[ -n "${FILTER:-}" ] && kfilter=(-k "$FILTER")
ncu --csv --metrics gpu__time_duration.sum "${kfilter[@]}" "$BIN" bench train --preset bench-small \
    --batch 8 --seq 2048 --steps "${STEPS:-1}" --warmup 1 >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
echo "ncu rc=$?"
python3 - "$OUT/ncu.csv" "${TOP:-40}" <<'PY' | tee "$OUT/kernels.txt"
import csv, re, sys
from collections import defaultdict
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.reader(lines))
if not rows:
    print("no ncu rows (see ncu.err)")
    sys.exit(0)
h = rows[0]
ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
tot, cnt = defaultdict(float), defaultdict(int)
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}
for r in rows[1:]:
    name = re.sub(r"<.*", "", r[ki]).replace("void ", "").strip()[:60]
    tot[name] += float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-6)
    cnt[name] += 1
all_ms = sum(tot.values())
print("%-60s %7s %10s %6s" % ("kernel", "calls", "ms", "%"))
for n in sorted(tot, key=lambda n: -tot[n])[: int(sys.argv[2])]:
    print("%-60s %7d %10.3f %6.1f" % (n, cnt[n], tot[n], 100 * tot[n] / all_ms))
print("%-60s %7d %10.3f" % ("(all kernels)", sum(cnt.values()), all_ms))
PY
