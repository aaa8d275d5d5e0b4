/* The op interface: every computation of the ZAYA1 forward and backward pass, at the granularity of
 * the fastest GPU kernel. ops/cpu/ implements them in plain C + OpenMP (the fp32 reference);
 * ops/cuda/ implements the same signatures on NVIDIA GPUs. ops.c dispatches on ctx->device.
 * Pointers are in the memory of ctx's device.
 *
 * Precision: a `zy_act *` buffer holds elements of ctx->act_dtype: fp32 on the CPU, bf16 on CUDA
 * (activations, activation gradients and the compute copy of the weight matrices). Everything typed
 * `float *` is fp32 on every device: master weights, parameter gradients, the residual stream,
 * norms' rstd, attention lse, router probabilities and gates. Arithmetic accumulates in fp32 (CPU
 * reductions in double). Use ops_act_at for pointer arithmetic on activation buffers.
 *
 * Conventions: activations are row-major with one row per token; N = B*T rows, sequence b owns rows
 * [b*T, (b+1)*T). Linear weights are [out, in] (HF layout). Backward ops ACCUMULATE (+=) into
 * parameter gradients (names starting with d and ending in w/b/scale...) and OVERWRITE input
 * gradients unless the comment says otherwise. Dimension names: B batch, T time, D model width,
 * Hq query heads, Hk key heads, d head dim, E experts, F expert width, R router width, V vocab. */
#ifndef ZY_OPS_H
#define ZY_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ZY_DEV_CPU = 0, ZY_DEV_CUDA = 1 } zy_device;
typedef enum { ZY_DTYPE_F32 = 0, ZY_DTYPE_BF16 = 1 } zy_dtype;

/* An element of an activation buffer: ctx->act_dtype (void so that no one indexes it directly). */
typedef void zy_act;

typedef struct {
    zy_device device;
    int num_threads;    /* CPU: OpenMP threads (0 = library default) */
    zy_dtype act_dtype; /* element type of zy_act buffers: F32 on the CPU, BF16 on CUDA */
    int gpu;            /* CUDA: device index */
    int prof;           /* nonzero: ops record their device time by name (ops_prof_read) */
    void *cuda;         /* CUDA: the stream, cuBLASLt plans, workspaces, profiler (ops/cuda) */
} zy_ctx;

/* ---- contexts ---- */
/* CPU context with num_threads OpenMP threads (0 = default); fp32 activations. */
void ops_ctx_init_cpu(zy_ctx *ctx, int num_threads);
/* How a CUDA context runs the expert GEMMs (the training config's cuda.* settings). */
#define ZY_EXPERT_STREAMS_MAX     16
#define ZY_EXPERT_STREAMS_DEFAULT 2
/* Which kernels run causal attention's forward and backward (cuda.attention; docs/attention.md):
 * AUTO cuDNN's fused attention where libcudnn.so.9 loads and builds a deterministic plan for the
 * shape, else zayac's; ZAYAC always zayac's; CUDNN always cuDNN's (the context fails to start
 * without the library, a shape it refuses ends the process). Decoding is always zayac's. */
typedef enum { ZY_ATTN_AUTO = 0, ZY_ATTN_ZAYAC = 1, ZY_ATTN_CUDNN = 2 } zy_attention_backend;
/* Their names, by value, NULL-terminated: "auto", "zayac", "cudnn". */
extern const char *const zy_attention_backend_names[];
/* cuDNN's attention backward workspace cap in GiB (cuda.attention_workspace_gib): AUTO runs cuDNN
 * on a shape only when its backward fits it, in one pass or in chunks of query rows sized to it.
 * ZY_ATTN_WORKSPACE_AUTO (0, the default, "auto" in configs): the cap starts at
 * ZY_ATTN_WORKSPACE_GIB_BASE and the job raises it to what one pass of its longest shape needs
 * when the memory it leaves spare holds that (ops_attention_workspace_grow): long contexts run the
 * deterministic backward in one pass where the GPU has room (1 x 32768 needs 16.1 GiB), in chunks
 * of the base cap where it has not. */
#define ZY_ATTN_WORKSPACE_AUTO     0
#define ZY_ATTN_WORKSPACE_GIB_BASE 2
#define ZY_ATTN_WORKSPACE_GIB_MIN  0.0625
#define ZY_ATTN_WORKSPACE_GIB_MAX  64.0
typedef struct {
    int expert_streams; /* side streams the expert GEMMs share, 1..ZY_EXPERT_STREAMS_MAX */
    /* cuda.overlap_optimizer: the optimizer update runs on a context beside this one
     * (ops_ctx_init_beside), overlapping the next step's forward (train/step.h); this context's
     * streams then run at the device's highest priority, so its work goes first wherever the two
     * compete for the SMs */
    int overlap_optimizer;
    int expert_chunk; /* 1: forward and input-gradient GEMMs by 256-row blocks in one call */
    int attention;    /* zy_attention_backend */
    float attention_workspace_gib; /* ZY_ATTN_WORKSPACE_AUTO, or ZY_ATTN_WORKSPACE_GIB_MIN..MAX */
} zy_cuda_opts;
/* The defaults: ZY_EXPERT_STREAMS_DEFAULT streams, the optimizer overlapped, no blocks,
 * ZY_ATTN_AUTO attention with the ZY_ATTN_WORKSPACE_AUTO cap. */
zy_cuda_opts ops_cuda_opts_default(void);
/* CUDA context on GPU `gpu` with bf16 activations and the default options. */
int ops_ctx_init_cuda(zy_ctx *ctx, int gpu);
/* CUDA context on GPU `gpu` with bf16 activations: creates the stream, the cuBLASLt contexts
 * (one per expert stream) and the workspaces; opts NULL = the defaults. ZY_ERR (with a message)
 * when built without CUDA, the GPU is unusable or an option is out of range. */
int ops_ctx_init_cuda_opts(zy_ctx *ctx, int gpu, const zy_cuda_opts *opts);
/* Releases what init created (a CPU context owns nothing). */
void ops_ctx_free(zy_ctx *ctx);
/* Number of CUDA GPUs this process can use (0 when built without CUDA or none present). */
int ops_cuda_device_count(void);
/* Device memory of ctx's GPU: *used = total - free (every process's), *total; both 0 on the CPU.
 * A runtime error when the query fails. */
int ops_device_mem(zy_ctx *ctx, size_t *used, size_t *total);
/* Waits until every op issued on ctx has finished (CPU: nothing to wait for); aborts with the
 * failing kernel's error when one failed. */
void ops_sync(zy_ctx *ctx);
/* CUDA: the cudaStream_t every op of ctx runs on (a communicator orders its work after it); NULL
 * on the CPU. */
void *ops_stream(zy_ctx *ctx);

/* ---- a second context on one device, and the order between the two ---- */
/* A context beside ctx, on its device: ops issued on it run on a stream of its own at the
 * device's lowest priority, with its own GEMM workspace (no expert side streams, zayac's
 * attention), so they can overlap ctx's work; memory is shared (either context's pointers are
 * valid in both). Marks (below) order the two. On the CPU: a CPU context like ctx (ops run in
 * the order they are issued, so marks have nothing to do). Freed with ops_ctx_free, after the
 * work on it finished (ops_sync). */
int ops_ctx_init_beside(zy_ctx *side, zy_ctx *ctx);
/* A point in one context's work that another context's later work can wait for. */
typedef struct zy_mark zy_mark;
zy_mark *ops_mark_new(zy_ctx *ctx);
void ops_mark_free(zy_ctx *ctx, zy_mark *m);
/* m completes when the work issued on ctx so far has run (re-recording moves it). */
void ops_mark(zy_ctx *ctx, zy_mark *m);
/* Work issued on ctx from now on starts after m completes; the host does not wait. */
void ops_wait_mark(zy_ctx *ctx, zy_mark *m);
/* The host waits until m completes (the work before it, not the work issued after). */
void ops_mark_wait_host(zy_ctx *ctx, zy_mark *m);

/* ---- activation dtype helpers ---- */
/* Bytes of one zy_act element of ctx. */
size_t ops_act_size(const zy_ctx *ctx);
/* p advanced by n elements of ctx->act_dtype. */
zy_act *ops_act_at(const zy_ctx *ctx, const zy_act *p, size_t n);
/* dst[n] = src[n] rounded to the activation dtype (fp32 -> bf16 on CUDA; a copy on the CPU). */
void ops_cast_to_act(zy_ctx *ctx, zy_act *dst, const float *src, size_t n);
/* dst[n] = src[n] widened to fp32. */
void ops_act_to_f32(zy_ctx *ctx, float *dst, const zy_act *src, size_t n);

/* ---- per-op timing (benchmarks) ---- */
typedef struct {
    const char *name; /* op name (static string) */
    long calls;
    double ms; /* total device time */
} zy_op_time;
/* Clears the accumulated times; on CUDA also makes the profiler's events, so that the first
 * profiled op does not pay for them. */
void ops_prof_reset(zy_ctx *ctx);
/* Waits for the device, then writes up to max entries (most time first); returns how many. */
int ops_prof_read(zy_ctx *ctx, zy_op_time *out, int max);

/* ---- memory ---- */
void *ops_alloc(zy_ctx *ctx, size_t bytes); /* zeroed; out of memory ends the process (exit 1) */
void ops_free(zy_ctx *ctx, void *p);
/* Zeroed device memory whose pages can be given back piecewise (ops_release_except) while every
 * address in it keeps its meaning: on CUDA a reserved address range backed granule by granule
 * (ops/cuda/vmm.cu); elsewhere ops_alloc's memory. Freed with ops_free. */
void *ops_alloc_releasable(zy_ctx *ctx, size_t bytes);
/* Gives back the pages of p (from ops_alloc_releasable, `bytes` long) that hold no byte of the
 * ranges keep[i] = {first byte, count}; returns the bytes still backed. Touching a given-back page
 * is a device fault. On the CPU nothing goes back (returns bytes). */
size_t ops_release_except(zy_ctx *ctx, void *p, size_t bytes, const size_t (*keep)[2], int nkeep);
/* Bytes ctx's device can still allocate: free GPU memory, or the host memory this process can
 * take (base/sysmem.h); 0 when unknown. */
size_t ops_mem_available(zy_ctx *ctx);
/* Bytes of device workspace attention's backward may take on ctx for micro-batches [B, T] with Hq
 * query heads of d: the larger of zayac's kernels' scratch and, when cuDNN may run (cuda.attention
 * auto or cudnn), its cap cuda.attention_workspace_gib. 0 on the CPU. For the memory estimate. */
size_t ops_attention_workspace_bytes(zy_ctx *ctx, int B, int T, int Hq, int d);
/* The attention backward workspace cap cuda.attention_workspace_gib = auto would want for
 * micro-batches [B, T] (Hq query and Hk key heads of d): cuDNN's deterministic backward in one
 * pass (builds its plans). 0 when the cap is fixed, cuDNN does not run attention on ctx or refuses
 * the shape; SIZE_MAX past ZY_ATTN_WORKSPACE_GIB_MAX. */
size_t ops_attention_workspace_wanted(zy_ctx *ctx, int B, int T, int Hq, int Hk, int d);
/* Under auto: raises ctx's cap to `want` (ops_attention_workspace_wanted) when the context's
 * workspace allocation of it (a quarter past a request) fits in the cap in force plus `spare`
 * bytes the job leaves unused; else keeps it. Only two outcomes, so the backward's chunking (and
 * its bits) depends on the shapes and whether one pass fits, not on how much memory is free. Call
 * before the first attention. Returns the cap in force (0 on the CPU, with zayac's kernels or
 * without cuDNN). */
size_t ops_attention_workspace_grow(zy_ctx *ctx, size_t want, size_t spare);
/* Copies bytes between any two of host and ctx's device memory (regions may overlap on the CPU);
 * returns when the copy is complete on the host side (a device-to-host copy waits for the device).
 */
void ops_copy(zy_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Host memory for copies to and from ctx's device: page-locked on CUDA (cudaHostAlloc: the copy
 * engines read and write it directly, at full bus speed, and ops_copy_async into it returns at
 * once), ordinary memory on the CPU. Not zeroed. Pinning is slow and takes the memory from the
 * host for good: allocate once and reuse. Memory the host cannot give ends the process (exit 1),
 * as ops_alloc does. */
void *ops_host_alloc(zy_ctx *ctx, size_t bytes);
/* Frees memory from ops_host_alloc (NULL is ignored). */
void ops_host_free(zy_ctx *ctx, void *p);
/* ops_copy that returns once the copy is queued on ctx's stream, before it has run (CUDA): dst
 * and src stay untouched until ops_sync(ctx); host memory from ops_host_alloc keeps it
 * asynchronous (other host memory makes the runtime wait). The CPU copies at once. */
void ops_copy_async(zy_ctx *ctx, void *dst, const void *src, size_t bytes);
/* Sets n floats to value. */
void ops_fill(zy_ctx *ctx, float *x, float value, size_t n);
/* Sets bytes to zero. */
void ops_zero(zy_ctx *ctx, void *p, size_t bytes);

/* ---- dense algebra ---- */
/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, A, B, C of the activation dtype (weights:
 * the model's compute copy), fp32 accumulation; op(A) is [M,K] (A stored [K,M] when transA),
 * op(B) is [K,N] (B stored [N,K] when transB). beta = 0 ignores C's old contents (even NaN). */
void ops_matmul(zy_ctx *ctx, zy_act *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                int transA, int transB, float alpha, float beta);
/* The same with an fp32 C (parameter gradients: beta = 1 accumulates in fp32). */
void ops_matmul_f32(zy_ctx *ctx, float *C, const zy_act *A, const zy_act *B, int M, int N, int K,
                    int transA, int transB, float alpha, float beta);
/* The expert GEMMs of an MoE layer, over rows grouped by expert: expert e owns rows
 * offsets_host[e] .. offsets_host[e+1]-1 (host memory, [E+1]) of the gathered matrices, W [E,N,K].
 * data_grad = 0: out[rows of e, N] = in[rows of e, K] W[e]^T (the forward);
 * data_grad = 1: out[rows of e, K] = in[rows of e, N] W[e]     (the input gradient).
 * Experts may run concurrently (CUDA: on side streams); results do not depend on it. */
void ops_expert_matmul(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                       const int32_t *offsets_host, int E, int N, int K, int data_grad);
/* Weight gradients of the same: dW[e] [N,K] (fp32) = dY[rows of e]^T X[rows of e] + beta dW[e];
 * beta is 0 (overwrite: an expert without rows gets zeros) or 1 (accumulate). */
void ops_expert_matmul_wgrad(zy_ctx *ctx, float *dW, const zy_act *dY, const zy_act *X,
                             const int32_t *offsets_host, int E, int N, int K, float beta);
/* Both gradients of the forward out = X W^T from dY: dX (ops_expert_matmul with data_grad = 1)
 * and dW (ops_expert_matmul_wgrad with beta), the same results; CUDA issues the two sets of
 * expert GEMMs together, so they share the side streams instead of running one after the other,
 * and where ops_experts_grouped says so runs dX as one grouped GEMM from `offsets` (the same
 * offsets in ctx's memory; NULL: per expert) on the context's stream beside the dW GEMMs.
 * wait = 0 leaves them running (CUDA): ops issued next may run beside them, as long as they
 * touch none of dX, dW, dY, X, W; ops_expert_join must come before anything that does. */
void ops_expert_matmul_bwd(zy_ctx *ctx, zy_act *dX, float *dW, const zy_act *dY, const zy_act *X,
                           const zy_act *W, const int32_t *offsets_host, const int32_t *offsets,
                           int E, int N, int K, float beta, int wait);
/* Waits (on the context's stream) for expert GEMMs left running; nothing on the CPU. */
void ops_expert_join(zy_ctx *ctx);
/* y[n] += x[n] (activation buffers). */
void ops_add_act(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n);
/* y[N,C] += bias[C] broadcast over rows */
void ops_add_bias(zy_ctx *ctx, zy_act *y, const float *bias, int N, int C);
/* x[N,C] += bias[C], then y = GELU(x): ops_add_bias then ops_gelu_fwd (the same bits), one pass
 * over x on CUDA. */
void ops_bias_gelu_fwd(zy_ctx *ctx, zy_act *y, zy_act *x, const float *bias, int N, int C);
/* dbias[C] += sum over rows of dy[N,C] */
void ops_bias_bwd(zy_ctx *ctx, float *dbias, const zy_act *dy, int N, int C);
/* dx = dy * GELU'(x) [N,C] (dx may alias dy) and dbias[C] += sum over rows of dx: gelu_bwd then
 * bias_bwd (the backward of bias_gelu), the same bits as the two ops; one pass over the rows on
 * CUDA. */
void ops_gelu_bias_bwd(zy_ctx *ctx, zy_act *dx, float *dbias, const zy_act *dy, const zy_act *x,
                       int N, int C);

/* ---- embedding and input affine (fp32: the table is the master weight, h the residual) ---- */
/* h[N,D] = (emb[ids[n]] + bias) * scale. ids must be in [0, V) (checked by the caller). */
void ops_embed_fwd(zy_ctx *ctx, float *h, const float *emb, const int32_t *ids, const float *bias,
                   const float *scale, int N, int D);
/* demb[ids[n]] += dh * scale (rows equal to skip_id get nothing, like torch's padding_idx; -1 =
 * none); dbias += sum dh*scale; dscale += sum dh*(emb+bias). */
void ops_embed_bwd(zy_ctx *ctx, float *demb, float *dbias, float *dscale, const float *dh,
                   const float *emb, const int32_t *ids, const float *bias, const float *scale,
                   int N, int D, int skip_id);

/* ---- RMSNorm ---- */
/* y[N,C] = x * rstd * w, rstd[N] = 1/sqrt(mean(x^2) + eps) (saved for backward). x has dtype xt:
 * ZY_DTYPE_F32 for the residual stream, ctx->act_dtype for the router state. */
void ops_rmsnorm_fwd(zy_ctx *ctx, zy_act *y, float *rstd, const void *x, zy_dtype xt,
                     const float *w, int N, int C, float eps);
/* dx (dtype xt like x; overwrite, or += when accumulate); dw += sum over rows dy * x * rstd. */
void ops_rmsnorm_bwd(zy_ctx *ctx, void *dx, float *dw, const zy_act *dy, const void *x, zy_dtype xt,
                     const float *w, const float *rstd, int N, int C, int accumulate);

/* ---- the router's input block (activation dtype) ----
 * z[N,R] += bias (+ r_prev * g when r_prev != NULL), then u0 = RMSNorm(z) * w, rstd saved:
 * ops_add_bias, ops_eda_fwd and ops_rmsnorm_fwd in one call (one pass on a GPU where the rows
 * allow it; the same bits either way). */
void ops_router_norm_fwd(zy_ctx *ctx, zy_act *z, zy_act *u0, float *rstd, const float *bias,
                         const zy_act *r_prev, const float *g, const float *w, int N, int R,
                         float eps);
/* Its backward: dz = RMSNorm backward of du0 (overwrite), + carry when carry_in; dw +=; with
 * r_prev, carry = dz * g (overwrite: the gradient the layer below adds) and dg += sum dz * r_prev;
 * dbias += sum dz. ops_rmsnorm_bwd, ops_add_act, ops_eda_bwd and ops_bias_bwd in one call. */
void ops_router_norm_bwd(zy_ctx *ctx, zy_act *dz, float *dw, float *dg, float *dbias, zy_act *carry,
                         int carry_in, const zy_act *du0, const zy_act *z, const zy_act *r_prev,
                         const float *w, const float *rstd, const float *g, int N, int R);

/* ---- residual scaling: out = (o + ob) * os + (h + rb) * rs, all [N,D], vectors [D] ----
 * o: a block's output (activation dtype); h, out: the fp32 residual stream. */
void ops_resscale_fwd(zy_ctx *ctx, float *out, const zy_act *o, const float *h, const float *ob,
                      const float *os, const float *rb, const float *rs, int N, int D);
/* From dout: do = dout*os (overwrite), dh = dout*rs (overwrite; dh may alias dout),
 * dob += sum dout*os, dos += sum dout*(o+ob), drb += sum dout*rs, drs += sum dout*(h+rb). */
void ops_resscale_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dob, float *dos, float *drb,
                      float *drs, const float *dout, const zy_act *o, const float *h,
                      const float *ob, const float *os, const float *rb, const float *rs, int N,
                      int D);

/* ---- residual scaling fused with the RMSNorm that reads its output ----
 * out = (o + ob) * os + (h + rb) * rs (fp32, the residual stream), then y = out * rstd * w (act),
 * rstd[N]: ops_resscale_fwd + ops_rmsnorm_fwd (x = out, fp32) in one pass. */
void ops_resnorm_fwd(zy_ctx *ctx, float *out, zy_act *y, float *rstd, const zy_act *o,
                     const float *h, const float *ob, const float *os, const float *rb,
                     const float *rs, const float *w, int N, int D, float eps);
/* Its backward: dout = dres (NULL = 0) + the norm's input gradient from dy, then the residual
 * scaling's backward from dout: d_o = dout*os (overwrite), dh = dout*rs (overwrite); dw, dob,
 * dos, drb, drs += as ops_rmsnorm_bwd and ops_resscale_bwd. dh may alias dres, d_o may alias dy. */
void ops_resnorm_bwd(zy_ctx *ctx, zy_act *d_o, float *dh, float *dw, float *dob, float *dos,
                     float *drb, float *drs, const zy_act *dy, const float *dres, const float *out,
                     const float *rstd, const float *w, const zy_act *o, const float *h,
                     const float *ob, const float *os, const float *rb, const float *rs, int N,
                     int D);

/* ---- CCA: convolutions and mean residuals ----
 * qk0[N,C] = [q0 (Hq*d) | k0 (Hk*d)] per row, C = (Hq+Hk)*d. Per sequence, the input is left-padded
 * with P = (t0-1)+(t1-1) zero rows (or, when state != NULL, the P rows of state[B,P,C] that came
 * before this chunk). Then
 *   mid[t,c]  = b1[c] + sum_{j<t0} w1[c,j] * xpad[t + j, c]                  for t in [0, T+t1-1)
 *   conv[t,c] = b2[c] + sum_{j<t1} sum_{i<d} w2[c,i,j] * mid[t + j, g*d + i], g = c / d (head)
 * (w1 [C,t0] = depthwise weight [C,1,t0]; w2 [C,d,t1] = grouped weight). Then with G = Hq/Hk,
 *   qr_i = (q0_i + k0_{i/G}) / 2,  kr_j = mean_{i in group j} qr_i,
 *   q[N,Hq*d] = conv[:, :Hq*d] + qr,  k[N,Hk*d] = conv[:, Hq*d:] + kr.
 * mid_save [B, T+t1-1, C] keeps the depthwise output for backward. Activations (q, k, mid_save,
 * qk0, state) have the activation dtype; weights and their gradients are fp32. */
void ops_cca_conv_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, zy_act *mid_save, const zy_act *qk0,
                      const zy_act *state, const float *w1, const float *b1, const float *w2,
                      const float *b2, int B, int T, int Hq, int Hk, int d, int t0, int t1);
/* Backward of the above given dq, dk: dqk0 (overwrite), dw1/db1/dw2/db2 (+=). No state gradient
 * (training always starts from zero padding). */
void ops_cca_conv_bwd(zy_ctx *ctx, zy_act *dqk0, float *dw1, float *db1, float *dw2, float *db2,
                      const zy_act *dq, const zy_act *dk, const zy_act *qk0, const zy_act *mid_save,
                      const float *w1, const float *w2, int B, int T, int Hq, int Hk, int d, int t0,
                      int t1);

/* ---- CCA: delayed values ----
 * vv[N, 2*half] = [vcur | vdel] per row (the current and delayed value projections, one GEMM);
 * v[N, 2*half] = [vcur[t] | vdel[t-1]] per row, vdel[-1] = prev[b] (prev [B,half]) or 0 if NULL. */
void ops_value_delay_fwd(zy_ctx *ctx, zy_act *v, const zy_act *vv, const zy_act *prev, int B, int T,
                         int half);
/* dvv = [dvcur | dvdel] (overwrite) from dv: dvcur[t] = dv[t, :half], dvdel[t] = dv[t+1, half:]
 * (0 at the last step). */
void ops_value_delay_bwd(zy_ctx *ctx, zy_act *dvv, const zy_act *dv, int B, int T, int half);

/* ---- CCA: QK norm, key temperature, partial RoPE ----
 * For each row n (position pos[n]) and head: x <- sqrt(d) * x / max(||x||, eps_norm), keys also
 * times temp[j]; then the first rot channels are rotated (rotate-half layout) with
 * inv_freq_i = theta^(-2i/rot), angle = pos * inv_freq_i. The inputs q_in [N,Hq*d], k_in
 * [N,Hk*d] (the conv's outputs, which the backward reads) give the outputs q, k (the same shapes;
 * q_in == q and k_in == k is allowed: in place). qn [N,Hq], kn [N,Hk] (fp32) save the clamped
 * norms. */
void ops_qknorm_rope_fwd(zy_ctx *ctx, zy_act *q, zy_act *k, float *qn, float *kn,
                         const zy_act *q_in, const zy_act *k_in, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm);
/* dq, dk in place (on entry: grads w.r.t. the outputs; on exit: w.r.t. the inputs); dtemp += . */
void ops_qknorm_rope_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, float *dtemp, const zy_act *q_in,
                         const zy_act *k_in, const float *qn, const float *kn, const float *temp,
                         const int32_t *pos, int N, int Hq, int Hk, int d, int rot, double theta,
                         float eps_norm);

/* ---- causal GQA attention ----
 * out[N,Hq*d]: per sequence, query t of head i attends keys s <= t (and s > t - window when
 * window > 0) of key head i/(Hq/Hk), softmax(scale * q.k) v. lse[B,Hq,T] (fp32) saved for
 * backward. */
void ops_attention_fwd(zy_ctx *ctx, zy_act *out, float *lse, const zy_act *q, const zy_act *k,
                       const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window);
/* dq, dk, dv (overwrite). */
void ops_attention_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, zy_act *dv, const zy_act *dout,
                       const zy_act *out, const float *lse, const zy_act *q, const zy_act *k,
                       const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                       int window);
/* Decoding: one new query row per sequence against a cache of Tk keys (kc/vc [B,Tmax,Hk*d] rows
 * 0..Tk-1). out [B,Hq*d]. */
void ops_attention_decode(zy_ctx *ctx, zy_act *out, const zy_act *q, const zy_act *kc,
                          const zy_act *vc, int B, int Tk, int Tmax, int Hq, int Hk, int d,
                          float scale, int window);

/* ---- elementwise (activation dtype) ---- */
/* y = GELU(x) exact (erf). */
void ops_gelu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *x, size_t n);
/* dx = dy * GELU'(x) (overwrite; dx may alias dy). */
void ops_gelu_bwd(zy_ctx *ctx, zy_act *dx, const zy_act *dy, const zy_act *x, size_t n);
/* gu [N, 2F] = [g | u] per row; y [N,F] = SiLU(g) * u. */
void ops_swiglu_fwd(zy_ctx *ctx, zy_act *y, const zy_act *gu, int N, int F);
/* dgu [N,2F] (overwrite) from dy [N,F]. */
void ops_swiglu_bwd(zy_ctx *ctx, zy_act *dgu, const zy_act *dy, const zy_act *gu, int N, int F);

/* ---- router ----
 * probs[N,E1] = softmax(logits) in fp32, E1 = E+1; choice[n] = argmax(probs + bias) (first index
 * wins ties); gate[n] = probs[n, choice] unless choice == E1-1 (skip) where gate = 0. */
void ops_router_select(zy_ctx *ctx, float *probs, int32_t *choice, float *gate,
                       const zy_act *logits, const float *bias, int N, int E1);
/* dlogits (overwrite) from dgate[N] through the softmax (skip rows get zero). */
void ops_router_bwd(zy_ctx *ctx, zy_act *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1);

/* ---- MoE dispatch / combine ----
 * From choice[N] in [0,E] (E = skip): counts[E], offsets[E+1] (exclusive scan; offsets[E] = routed
 * rows), perm[N]: routed rows sorted by expert, stable in n, then the skipped rows in order of n
 * (so perm is a permutation of 0..N-1); rows of expert e are perm[offsets[e]..offsets[e+1]). All
 * in ctx's memory; offsets_host [E+1] (host memory) receives a copy of offsets, which the expert
 * GEMM loop needs on the host. Returns the routed row count (waits for the device). */
int ops_moe_dispatch(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                     int32_t *perm, const int32_t *choice, int N, int E);
/* ops_moe_dispatch without waiting: offsets_host (ops_host_alloc memory, so the copy does not
 * wait either) holds the copy once ops_sync(ctx) has returned; ops_moe_routed reads it then. */
void ops_moe_dispatch_async(zy_ctx *ctx, int32_t *counts, int32_t *offsets, int32_t *offsets_host,
                            int32_t *perm, const int32_t *choice, int N, int E);
/* The routed row count from a dispatch's host copy of the offsets; aborts naming the first row
 * whose choice was outside [0, E] (the device marks it there). */
int ops_moe_routed(const int32_t *offsets_host, int N, int E);
/* 1 when ops_expert_matmul_grouped runs on ctx for weights [E, N, K] and pays there (CUDA with
 * the Hopper kernel, ops/cuda/grouped_gemm.h, on expert matrices up to 4M elements), so the
 * forward can issue a layer's MoE without waiting for the dispatch; 0 on the CPU, which has
 * nothing to wait for. */
int ops_experts_grouped(zy_ctx *ctx, int E, int N, int K);
/* ops_expert_matmul's forward (data_grad 0) with the offsets in ctx's memory (from
 * ops_moe_dispatch_async): out[rows of e] = in[rows of e] W[e]^T for in, out of `rows` rows;
 * rows at and past offsets[E] are not written. Only where ops_experts_grouped says so. */
void ops_expert_matmul_grouped(zy_ctx *ctx, zy_act *out, const zy_act *in, const zy_act *W,
                               const int32_t *offsets, int E, int N, int K, int rows);
/* The gate_up projection with its SwiGLU, offsets in ctx's memory: gu[rows of e] = in[rows of e]
 * W[e]^T with W [E, 2F, K] (ops_expert_matmul_grouped with N = 2F, the same bits), and act[r, f]
 * = ops_swiglu_fwd of those gu rows (the same bits), in one pass on CUDA; rows at and past
 * offsets[E] of gu and act are not written. Only where ops_experts_grouped says so for [E, 2F,
 * K]. */
void ops_expert_swiglu_grouped(zy_ctx *ctx, zy_act *gu, zy_act *act, const zy_act *in,
                               const zy_act *W, const int32_t *offsets, int E, int F, int K,
                               int rows);
/* xs[r,:] = x[perm[r],:] for r < nrows. */
void ops_gather_rows(zy_ctx *ctx, zy_act *xs, const zy_act *x, const int32_t *perm, int nrows,
                     int C);
/* y[N,D] = 0 for all rows, then y[perm[r]] = gate[perm[r]] * ys[r] for r < nrows where the gate
 * is not 0 (a skipped row's gate is 0: with nrows = N, ys's rows past the routed ones, which no
 * expert wrote, are not read). */
void ops_moe_combine(zy_ctx *ctx, zy_act *y, const zy_act *ys, const float *gate,
                     const int32_t *perm, int nrows, int N, int D);
/* dys[r] = gate[perm[r]] * dy[perm[r]] (overwrite), dgate[n] = dot(dy[n], ys[r]) for routed n,
 * 0 for skipped rows (overwrite all N). */
void ops_moe_combine_bwd(zy_ctx *ctx, zy_act *dys, float *dgate, const zy_act *dy, const zy_act *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D);
/* dx[perm[r]] += dxs[r] (scatter-add). */
void ops_scatter_add_rows(zy_ctx *ctx, zy_act *dx, const zy_act *dxs, const int32_t *perm,
                          int nrows, int C);

/* ---- loss ----
 * Cross-entropy over logits [N,V] with targets[N] (ignore_index rows count for nothing).
 * Returns the SUM of losses over counted rows (double; waits for the device) and writes *count;
 * when dlogits != NULL it is set to (softmax - onehot) * grad_scale for counted rows and 0 for
 * ignored rows. dlogits may alias logits. The softmax is computed in fp32 and never stored. */
double ops_xent_fwd_bwd(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits, const int32_t *targets,
                        int N, int V, int ignore_index, float grad_scale, int *count);
/* The loss's sum and count as ops_xent_fwd_bwd_queued leaves them. */
typedef struct {
    double sum;
    int count;
} zy_loss_host;
/* ops_xent_fwd_bwd with the sum and count copied to *out after it, queued: the host does not
 * wait, so it can issue the backward while the forward still runs. *out must be page-locked
 * (ops_host_alloc) on a GPU and is valid once the host waited for a mark issued after this call
 * (ops_mark_wait_host) or for the context (ops_sync); the CPU writes it before returning. */
void ops_xent_fwd_bwd_queued(zy_ctx *ctx, zy_act *dlogits, const zy_act *logits,
                             const int32_t *targets, int N, int V, int ignore_index,
                             float grad_scale, zy_loss_host *out);

/* ---- router depth averaging (EDA), activation dtype ----
 * z[N,R] += r_prev[N,R] * g[R] (g broadcast over rows). */
void ops_eda_fwd(zy_ctx *ctx, zy_act *z, const zy_act *r_prev, const float *g, int N, int R);
/* dr_prev = dz * g (overwrite); dg += sum over rows dz * r_prev. */
void ops_eda_bwd(zy_ctx *ctx, zy_act *dr_prev, float *dg, const zy_act *dz, const zy_act *r_prev,
                 const float *g, int N, int R);

#endif
