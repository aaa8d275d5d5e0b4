"""Times torch.nn.functional.scaled_dot_product_attention (bf16, is_causal=True, enable_gqa=True)
forward, backward and forward+backward on the ZAYA1 attention shapes (Hq=8, Hk=2, d=128;
B=8 T=2048, B=4 T=4096 and B=1 T=32768), with CUDA events (median of many runs after a warm-up), for the
default backend choice and each backend forced, in two layouts: zayac's token-major rows
([B,T,H,d] viewed as [B,H,T,d], as HF calls it) and torch's contiguous [B,H,T,d].
Prints one RESULT line per measurement. With --ours FILE (the output of
`dev/test_attention_variants --bench`) it also prints the comparison table (markdown) of zayac's kernels
against the fastest torch configuration. Runs on the GPU machine (dev/scripts/gpu_attention.sh,
scripts/gpu_attention_cudnn.sh)."""
import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F

HQ, HK, D = 8, 2, 128
SHAPES = [(8, 2048), (4, 4096), (1, 32768)]


def median_ms(fn, warm=5, reps=30):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def backends():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    yield "default", contextlib.nullcontext
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        yield name, (lambda be=be: sdpa_kernel(be))


def kernel_names(fn):
    """Names of the CUDA kernels one call of fn launches (which backend really ran)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages() if "CUDA" in str(e.device_type)}
    return sorted(n[:60] for n in names)


def run_torch():
    rows = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for B, T in SHAPES:
        fl = 4.0 * B * T * T * HQ * D / 2  # causal forward
        for layout in ("tokens", "heads"):
            def make(h):
                shape = (B, T, h, D) if layout == "tokens" else (B, h, T, D)
                x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
                return x.requires_grad_()

            qb, kb, vb = make(HQ), make(HK), make(HK)
            dout = torch.randn((B, HQ, T, D), device="cuda", dtype=torch.bfloat16, generator=gen)
            if layout == "tokens":
                dout = dout.transpose(1, 2).contiguous().transpose(1, 2)

            def view(x):
                return x.transpose(1, 2) if layout == "tokens" else x

            def fwd():
                return F.scaled_dot_product_attention(view(qb), view(kb), view(vb),
                                                      is_causal=True, enable_gqa=True)

            def fwd_bwd():
                return torch.autograd.grad(fwd(), (qb, kb, vb), dout)

            for name, ctx in backends():
                try:
                    with ctx():
                        t_f = median_ms(fwd)
                        out = fwd()
                        t_b = median_ms(lambda: torch.autograd.grad(out, (qb, kb, vb), dout,
                                                                    retain_graph=True))
                        del out
                        t_fb = median_ms(fwd_bwd)
                        if name == "default" and layout == "tokens":
                            print(f"  B={B} T={T} default kernels: {kernel_names(fwd_bwd)}")
                except Exception as e:  # a backend that refuses the shape or GQA
                    print(f"  B={B} T={T} {layout} {name}: not run ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:120]})")
                    continue
                for what, ms, f in (("fwd", t_f, fl), ("bwd", t_b, 2.5 * fl),
                                    ("fwd+bwd", t_fb, 3.5 * fl)):
                    tag = f"{what}/{name}/{layout}"
                    print(f"RESULT torch {tag} {B} {T} {ms:.4f} {f / ms / 1e9:.2f}")
                    rows.append(("torch", tag, B, T, ms, f / ms / 1e9))
                sys.stdout.flush()
            del qb, kb, vb, dout
            torch.cuda.empty_cache()
    return rows


def read_results(path):
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) == 7 and f[0] == "RESULT":
            rows.append((f[1], f[2], int(f[3]), int(f[4]), float(f[5]), float(f[6])))
    return rows


def compare(ours, theirs):
    print("\n| B | T | pass | zayac ms | zayac TFLOP/s | torch best ms | torch TFLOP/s | torch config"
          " | torch ms / zayac ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for B, T in SHAPES:
        for what, our_tag in (("fwd", "fwd/best"), ("bwd", "bwd/best"),
                              ("fwd+bwd", "fwd+bwd/default")):
            o = [r for r in ours if r[1] == our_tag and r[2] == B and r[3] == T]
            t = [r for r in theirs if r[1].split("/")[0] == what and r[2] == B and r[3] == T]
            if not o or not t:
                print(f"| {B} | {T} | {what} | missing | | | | | |")
                continue
            best = min(t, key=lambda r: r[4])
            print(f"| {B} | {T} | {what} | {o[0][4]:.3f} | {o[0][5]:.1f} | {best[4]:.3f} | "
                  f"{best[5]:.1f} | {best[1].split('/', 1)[1]} | {best[4] / o[0][4]:.2f} |")
    print("\nzayac variants (ms, TFLOP/s):")
    for r in ours:
        print(f"  {r[1]:18s} B={r[2]} T={r[3]}: {r[4]:.3f} ms, {r[5]:.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", help="output of dev/test_attention_variants --bench")
    args = ap.parse_args()
    theirs = run_torch()
    if args.ours:
        compare(read_results(args.ours), theirs)


if __name__ == "__main__":
    main()
