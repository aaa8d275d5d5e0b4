#!/usr/bin/env bash
# Issue 5 on the lent GPU machine (2 x H200), in one call: build zayac and nccl-tests, run the GPU
# tests, the collective sweeps of both on 1 and 2 GPUs, the launcher and failure demonstrations,
# the GEMM sweep against torch.matmul and the memory sweep against a torch copy, then compare.
# Usage (from the zayac root, with the Debian packages and nccl-tests sources beside it):
#   DEBS=../debs NCCL_TESTS=../nccl-tests bash scripts/gpu_bench_issue5.sh
# Everything lands in $OUT/r (tarred to $OUT/issue5.tgz); the comparison is printed last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH
ROOT=$(pwd)
DEBS=${DEBS:-../debs}
NCCL_TESTS=${NCCL_TESTS:-../nccl-tests}
OUT=${OUT:-/tmp/issue5_out}
R=$OUT/r
mkdir -p "$R/logs" "$R/zayac" "$R/nccl-tests"
SIZES="-b 8 -e 4G -f 2"
ITERS="-w 5 -n 40"
NJ=$(nproc)
T0=$(date +%s)

# step NAME TIMEOUT CMD...: runs CMD with a time limit, logging to $R/logs/NAME.log
step() {
    local name=$1 limit=$2
    shift 2
    local t=$(date +%s)
    if [ $((t - T0)) -gt ${BUDGET_S:-530} ]; then # leave time to pack the results
        echo "$name skipped: out of time" | tee -a "$R/steps.txt"
        return 99
    fi
    timeout --kill-after=10 "$limit" "$@" >"$R/logs/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $(($(date +%s) - t))s (at $(($(date +%s) - T0))s)" | tee -a "$R/steps.txt"
    return $rc
}

finish() {
    cd "$OUT" && tar czf issue5.tgz r && cp r/summary.md summary.md 2>/dev/null
    echo "total $(($(date +%s) - T0))s"
}
trap finish EXIT

# --- the machine
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi
    nvidia-smi topo -m
    nvcc --version | tail -2
    ls -l /usr/include/nccl.h /usr/local/cuda/include/nccl.h /usr/lib/x86_64-linux-gnu/libnccl* \
        /usr/local/cuda/lib64/libnccl* 2>&1
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count())'
    nproc
    free -g
} >"$R/logs/machine.log" 2>&1

# --- builds: nccl-tests in the background while zayac builds
DEPS=/tmp/zy_deps
mkdir -p $DEPS
for f in "$DEBS"/*.deb; do dpkg -x "$f" $DEPS; done
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:$DEPS/usr/lib/x86_64-linux-gnu/openblas-openmp:${LD_LIBRARY_PATH:-}
NT=/tmp/nccl-tests
rm -rf $NT && cp -r "$NCCL_TESTS" $NT
(cd $NT/src && timeout 400 make -j"$NJ" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ../build/all_reduce_perf \
    ../build/all_gather_perf ../build/reduce_scatter_perf ../build/broadcast_perf \
    ../build/alltoall_perf >"$R/logs/nccl_tests_build.log" 2>&1; echo "rc=$?" >>"$R/logs/nccl_tests_build.log") &
NT_PID=$!
step build_zayac 300 make -j"$NJ" DEPS_ROOT=$DEPS all
Z=$ROOT/build/zayac
[ -x "$Z" ] || { echo "zayac did not build"; tail -30 "$R/logs/build_zayac.log"; exit 1; }

# --- failure demonstrations that need no GPU time (in the background)
(
    cd /tmp
    # a peer that never arrives: rank 0 of 2 alone, then rank 1 of 2 alone
    s=$(date +%s%N)
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29701 $Z bench collectives --timeout 5 -o /tmp/x
    echo "rank0-alone rc=$? after $((($(date +%s%N) - s) / 1000000)) ms"
    s=$(date +%s%N)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29702 $Z bench collectives --timeout 5 -o /tmp/x
    echo "rank1-alone rc=$? after $((($(date +%s%N) - s) / 1000000)) ms"
) >"$R/logs/demo_missing_peer.log" 2>&1 &
DEMO_PID=$!

step gpu_tests 300 make -j"$NJ" DEPS_ROOT=$DEPS test
grep -E "passed|failing|FAILED" "$R/logs/gpu_tests.log" | tail -5
wait $NT_PID
tail -2 "$R/logs/nccl_tests_build.log"
wait $DEMO_PID

# --- collectives: zayac and nccl-tests (one process, -g GPUs) over the same sizes, interleaved per
# collective so both see the GPUs in the same state
run_pair() { # NGPU COLLECTIVE DTYPE
    local n=$1 c=$2 dt=$3 ntd=bfloat16
    [ "$dt" = fp32 ] && ntd=float
    step zayac_${c}_${dt}_n$n 240 $Z launch -n $n -- $Z bench collectives $SIZES $ITERS \
        --ops $c --dtypes $dt -o "$R/zayac/${c}_${dt}"
    step nt_${c}_${dt}_n$n 240 $NT/build/${c}_perf $SIZES $ITERS -g $n -d $ntd -c 1
    cp "$R/logs/nt_${c}_${dt}_n$n.log" "$R/nccl-tests/"
}
for n in 2 1; do
    for c in all_reduce reduce_scatter all_gather broadcast alltoall; do run_pair $n $c bf16; done
    run_pair $n all_reduce fp32
done
for c in all_reduce reduce_scatter all_gather broadcast alltoall; do
    step combine_$c 60 $Z bench collectives --combine -o "$R/zayac/plots" \
        "$R/zayac/${c}_bf16/collectives_n1.json" "$R/zayac/${c}_bf16/collectives_n2.json"
done
step combine_fp32 60 $Z bench collectives --combine -o "$R/zayac/plots" \
    "$R/zayac/all_reduce_fp32/collectives_n1.json" "$R/zayac/all_reduce_fp32/collectives_n2.json"
# the communicator mode: a non-blocking one costs a helper thread per call inside NCCL
step diag_nonblocking 120 $Z launch -n 2 -- $Z bench collectives -b 64K -e 64M -f 4 \
    --ops all_reduce --nccl-nonblocking -o /tmp/nb
step diag_blocking 120 $Z launch -n 2 -- $Z bench collectives -b 64K -e 64M -f 4 \
    --ops all_reduce -o /tmp/b

# --- other launchers and failures with GPUs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
step demo_mpirun 120 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH \
    -x NCCL_DEBUG=INFO $Z bench collectives -b 1M -e 64M -f 8 --ops all_reduce,alltoall -o /tmp/mpi
step demo_env_vars 120 bash -c "
    for r in 0 1; do RANK=\$r WORLD_SIZE=2 LOCAL_RANK=\$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29711 \
        $Z bench collectives -b 1M -e 16M -f 4 --ops broadcast -o /tmp/envv & done; wait"
# a rank dies mid-sweep (SIGKILL at 1 MB), started by plain variables: rank 0 must stop with an
# error naming rank 1, well before its 60 s timeout
step demo_rank_dies 120 bash -c "
    s=\$(date +%s%N)
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29721 ZAYAC_DEBUG_KILL=1:1048576 \
        $Z bench collectives -b 64K -e 16M --timeout 60 -o /tmp/die &
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29721 \
        $Z bench collectives -b 64K -e 16M --timeout 60 -o /tmp/die
    echo \"rank 0 rc=\$? after \$(((\$(date +%s%N) - s) / 1000000)) ms\"; wait"
# a rank that hangs (SIGSTOP at 1 MB) with a 10 s timeout: rank 0 must give up after ~10 s
step demo_rank_hangs 120 bash -c "
    s=\$(date +%s%N)
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 ZAYAC_DEBUG_KILL=1:1048576:19 \
        $Z bench collectives -b 64K -e 16M --timeout 10 -o /tmp/hang &
    p1=\$!
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 \
        $Z bench collectives -b 64K -e 16M --timeout 10 -o /tmp/hang
    echo \"rank 0 rc=\$? after \$(((\$(date +%s%N) - s) / 1000000)) ms\"
    kill -9 \$p1; wait"
# the same under zayac launch: the launcher stops rank 0 and returns rank 1's code (137)
step demo_launch_kill 120 bash -c "
    $Z launch -n 2 -- env ZAYAC_DEBUG_KILL=1:1048576 $Z bench collectives -b 64K -e 16M -o /tmp/die2
    echo \"launch rc=\$?\""

# --- GEMM, and torch.matmul in the same call
step zayac_gemm 400 $Z bench gemm -o "$R/zayac/gemm"
# the largest squares again with the best of 8 cuBLASLt candidates (is the heuristic's first the best?)
step zayac_gemm_algos8 120 $Z bench gemm --dtypes bf16 --algos 8 -o "$R/zayac/gemm_algos8" \
    --shapes 16384x16384x16384,16384x16384x16384:xw,8192x8192x8192,8192x8192x8192:xw
cat >/tmp/torch_ref.py <<'EOF'
import json, sys, torch
def timeit(fn, iters):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    best = None
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters): fn()
        b.record(); b.synchronize()
        t = a.elapsed_time(b) / 1e3 / iters
        best = t if best is None else min(best, t)
    return best
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
torch.manual_seed(0)
for n in (8192, 16384):
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    fl = 2.0 * n ** 3
    out[f"matmul_bf16_{n}_x@w"] = fl / timeit(lambda: torch.matmul(x, w), 10) / 1e12
    out[f"matmul_bf16_{n}_x@w.T"] = fl / timeit(lambda: torch.matmul(x, w.t()), 10) / 1e12
    del x, w
for gib in (1, 4):
    n = gib * (1 << 30) // 4
    s = torch.rand(n, device="cuda"); d = torch.empty_like(s)
    out[f"copy_{gib}GiB_GBps"] = 2 * n * 4 / timeit(lambda: d.copy_(s), 20) / 1e9
    del s, d
    torch.cuda.empty_cache()
print(json.dumps(out, indent=1))
json.dump(out, open(sys.argv[1], "w"), indent=1)
EOF
step torch_ref 180 python3 /tmp/torch_ref.py "$R/torch_ref.json"

# --- memory bandwidth
step zayac_membw 300 $Z bench membw -o "$R/zayac/membw"

# --- compare
cat >/tmp/compare.py <<'EOF'
import json, os, re, sys
R = sys.argv[1]
lines = []
def P(s=""): lines.append(s)
def nt_rows(path):
    rows = {}
    if not os.path.exists(path): return rows
    for ln in open(path):
        f = ln.split()
        if len(f) < 13 or ln.startswith("#") or not f[0].isdigit(): continue
        size = int(f[0])
        def num(x):
            try: return float(x)
            except ValueError: return float("nan")
        rows[size] = dict(oop=(num(f[5]), num(f[6]), num(f[7]), f[8]), ip=(num(f[9]), num(f[10]), num(f[11]), f[12]))
    return rows
names = {"all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather", "broadcast": "broadcast", "alltoall": "alltoall"}
P("# Issue 5: zayac vs nccl-tests, torch (one call, same machine)")
P()
worst = []
for dt in ("bf16", "fp32"):
    for n in (2, 1):
        for c in names:
            jp = f"{R}/zayac/{c}_{dt}/collectives_n{n}.json"
            if not os.path.exists(jp): continue
            z = json.load(open(jp))
            ntp = f"{R}/nccl-tests/nt_{c}_{dt}_n{n}.log"
            nt = nt_rows(ntp)
            zr = [r for r in z["rows"] if r["collective"] == c and r["dtype"] == dt]
            if not zr: continue
            # one GPU: busbw is 0 by definition (except broadcast), and NCCL skips in-place work
            metric = "busbw_GBps" if (n > 1 or c == "broadcast") else "algbw_GBps"
            mi = 2 if metric == "busbw_GBps" else 1
            P(f"## {c} {dt} {n} GPU(s): {metric.split('_')[0]} GB/s, zayac / nccl-tests (out-of-place | in-place)")
            P("| size | zayac oop | nccl oop | ratio | zayac ip | nccl ip | ratio | wrong z/n |")
            P("|---|---|---|---|---|---|---|---|")
            peak = [0, 0]
            for r in sorted([r for r in zr if r["placement"] == "out-of-place"], key=lambda r: r["size_bytes"]):
                s = r["size_bytes"]
                rip = next((q for q in zr if q["placement"] == "in-place" and q["size_bytes"] == s), None)
                t = nt.get(s)
                zo, zi = r[metric], (rip[metric] if rip else float("nan"))
                no, ni = (t["oop"][mi], t["ip"][mi]) if t else (float("nan"), float("nan"))
                ro = zo / no if no and no == no and no > 0 else float("nan")
                ri = zi / ni if ni and ni == ni and ni > 0 and n > 1 else float("nan")
                peak[0] = max(peak[0], zo, zi if n > 1 else 0)
                peak[1] = max(peak[1], no if no == no else 0, ni if (ni == ni and n > 1) else 0)
                if s > (1 << 20):
                    for rr in (ro, ri):
                        if rr == rr: worst.append((abs(rr - 1), rr, c, dt, n, s))
                fw = lambda v: "N/A" if v is None or v < 0 else str(int(v))
                wz = f"{fw(r['wrong'])}/{fw(rip['wrong'] if rip else None)}"
                wn = f"{t['oop'][3]}/{t['ip'][3]}" if t else "-"
                P(f"| {s} | {zo:.2f} | {no:.2f} | {ro:.3f} | {zi:.2f} | {ni:.2f} | {ri:.3f} | {wz} {wn} |")
            P(f"peak: zayac {peak[0]:.1f}, nccl-tests {peak[1]:.1f}")
            P()
worst.sort(reverse=True)
bad = [w for w in worst if w[0] > 0.05]
P(f"## sizes above 1 MB: {len(worst)} comparisons, {len(bad)} outside 5%")
for w in worst[:12]:
    P(f"- ratio {w[1]:.3f}: {w[2]} {w[3]} n={w[4]} size={w[5]}")
P()
tr = json.load(open(f"{R}/torch_ref.json")) if os.path.exists(f"{R}/torch_ref.json") else {}
gp = f"{R}/zayac/gemm/gemm.json"
if os.path.exists(gp):
    g = json.load(open(gp))
    P("## GEMM (bf16, TFLOP/s)")
    for n in (8192, 16384):
        for lay, key in (("XW^T", f"matmul_bf16_{n}_x@w.T"), ("XW", f"matmul_bf16_{n}_x@w")):
            r = next((r for r in g["rows"] if r["dtype"] == "bf16" and r["group"] == "square" and r["M"] == n and r["layout"] == lay), None)
            if r and key in tr:
                P(f"- {n}^3 {lay}: zayac {r['tflops']:.1f}, torch {key} {tr[key]:.1f}, ratio {r['tflops']/tr[key]:.3f}")
    P(f"- peaks: {g.get('peak_tflops')}")
mp = f"{R}/zayac/membw/membw.json"
if os.path.exists(mp):
    m = json.load(open(mp))
    P("## memory (GB/s, read + written)")
    for gib in (1, 4):
        s = gib << 30
        for k in ("copy", "memcpy_d2d", "scale", "triad"):
            r = next((r for r in m["rows"] if r["kind"] == k and r["bytes"] == s), None)
            key = f"copy_{gib}GiB_GBps"
            if r and key in tr:
                P(f"- {gib} GiB {k}: zayac {r['GBps']:.0f}, torch copy {tr[key]:.0f}, ratio {r['GBps']/tr[key]:.3f}")
    best = {}
    for r in m["rows"]: best[r["kind"]] = max(best.get(r["kind"], 0), r["GBps"])
    P(f"- best per kind: " + ", ".join(f"{k} {v:.0f}" for k, v in best.items()))
open(f"{R}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
step compare 60 python3 /tmp/compare.py "$R"
echo "=== steps"; cat "$R/steps.txt"
echo "=== demos"; cat "$R/logs/demo_missing_peer.log"
for d in demo_rank_dies demo_rank_hangs demo_launch_kill; do tail -n 4 "$R/logs/$d.log"; done
echo "=== diag"; for d in diag_nonblocking diag_blocking demo_mpirun; do grep -E "^ +(65536|1048576|4194304|16777216|67108864) " "$R/logs/$d.log" | head -5; done
echo "=== gemm observations"; sed -n '/# observations/,$p' "$R/logs/zayac_gemm.log" | head -60
echo "=== membw"; grep "# best" "$R/logs/zayac_membw.log"
echo "=== summary (short)"; grep -E "^(## sizes|- ratio|- [0-9]+|peak:|- peaks|- best)" "$R/summary.md"
