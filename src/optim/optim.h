/* The optimiser: AdamW for every trained tensor, or Muon for the hidden 2-D matrices (each matrix
 * of an [E, out, in] expert stack on its own) with AdamW for the rest. It owns the optimiser state
 * (AdamW moments, Muon momentum, the step counter and a Newton-Schulz workspace); parameters and
 * gradients are flat fp32 buffers laid out by a zy_param_table and belong to the caller.
 *
 * The math lives in small functions over flat arrays (optim_adamw_update, optim_muon_momentum,
 * optim_newton_schulz, optim_muon_scale, optim_apply_update) so a CUDA version can mirror each one.
 *
 * Weight decay (decoupled, p -= lr * wd * p) applies to the kinds in cfg.decay_kinds; the default
 * is matrices and embeddings. Vectors (norms, scales, biases, temperatures) are excluded because
 * decaying them pulls gains towards 0 rather than regularising; convolution kernels are excluded
 * because they are tiny per-channel filters that behave like gains (the CCA short convolutions).
 * Buffers (ZY_PARAM_BUFFER, the balancing biases) are never touched.
 *
 * Devices: the optimiser lives on the zy_ctx given to optim_init, whose memory holds params, grads
 * and the state (fp32 everywhere). On a CUDA context optim_step runs on the GPU (optim_cuda.h):
 * one fused launch for every AdamW tensor, and Muon's Newton-Schulz batched over same-shape
 * matrices with bf16 GEMMs (fp32 accumulation), so the Muon update differs from the CPU's by bf16
 * rounding (~1% relative); AdamW gives the CPU's bits.
 *
 * Checkpoints and the state on a GPU: optim_state_tensors always points into HOST memory: the
 * state itself on a CPU context, a host mirror of it on CUDA (page-locked, made at first use or
 * by optim_state_mirror) or where an entry's state is a slice (ZeRO-1's split entries: the mirror
 * holds it whole). Before saving, call optim_state_to_host (state -> mirror); after loading into
 * the entries, call optim_state_from_host (mirror -> state). Both are no-ops without a mirror, so
 * callers need not care which device they run on. Only those two calls (and loads into
 * the entries) change the mirror, so a background writer may read it while training goes on
 * (optim_state_mirrored); the CPU's entries are the live state, which every step changes. */
#ifndef ZY_OPTIM_H
#define ZY_OPTIM_H

#include "ops/ops.h"
#include "optim/ns_coef.h"
#include "optim/state.h"
#include "tensor/params.h"

#include <stddef.h>
#include <stdint.h>

/* How the orthogonalised Muon update is scaled before the learning rate. */
typedef enum {
    ZY_MUON_SCALE_NONE = 0,            /* the raw orthogonal update (RMS ~ 1/sqrt(max(out,in))) */
    ZY_MUON_SCALE_MATCH_ADAMW_RMS = 1, /* * 0.2 * sqrt(max(out, in)): update RMS ~0.2 like AdamW
                                          (Moonlight), so AdamW's lr and wd carry over */
    ZY_MUON_SCALE_SPECTRAL = 2,        /* * sqrt(max(1, out / in)) (Keller Jordan's Muon); wants a
                                          larger lr (set muon_lr_ratio, e.g. 0.02 / adamw lr) */
} zy_muon_scale;

/* Bit of a zy_param_kind in zy_optim_config.decay_kinds. */
#define ZY_KIND_BIT(kind)      (1u << (unsigned)(kind))
#define ZY_DECAY_KINDS_DEFAULT (ZY_KIND_BIT(ZY_PARAM_MATRIX) | ZY_KIND_BIT(ZY_PARAM_EMBED))

typedef struct {
    float lr;                 /* peak lr, for the config file; optim_step uses its lr_now only */
    float beta1, beta2, eps;  /* AdamW */
    float weight_decay;       /* decoupled, for the kinds in decay_kinds (AdamW and Muon alike) */
    unsigned decay_kinds;     /* ZY_KIND_BIT(...) mask; default matrices + embeddings */
    int use_muon;             /* 0: AdamW for everything; 1: Muon for ZY_PARAM_MATRIX tensors */
    float muon_momentum;      /* mu, 0.95 */
    int muon_nesterov;        /* 1: update = g + mu*M; 0: update = M */
    int muon_ns_steps;        /* Newton-Schulz iterations, 5 */
    int muon_ns_coefs;        /* zy_ns_coefs: their coefficients (ns_coef.h), ZY_NS_FIXED */
    int muon_ns_precond;      /* zy_ns_precond: the starting iterate (ns_coef.h), FROBENIUS */
    zy_muon_scale muon_scale; /* default ZY_MUON_SCALE_MATCH_ADAMW_RMS */
    float muon_lr_ratio;      /* Muon lr = lr_now * muon_lr_ratio (1 with MATCH_ADAMW_RMS) */
    int embedding_update;     /* data parallel (train/zero1.h): who updates the tied embedding,
                                 a zy_embedding_update (the `dist.embedding_update` setting) */
    int adam_moments;         /* zy_adam_moments: the precision AdamW's moments are kept in */
    int muon_momentum_dtype;  /* zy_adam_moments: the precision Muon's momentum is kept in */
} zy_optim_config;

/* AdamW's moments: fp32 (the default), or rounded to bf16 after each update, stochastically with
 * hashed bits (optim/moments.h), as DeepSeek-V3 keeps them. On a GPU bf16 moments take 2 bytes
 * each (the update moves 22 bytes an element instead of 30, the state is half as large); on the
 * CPU, the reference, they stay in fp32 buffers holding the bf16 values. The weights, gradients
 * and the checkpoints' state stay fp32 (a bf16 value is exact in fp32), so a checkpoint resumes
 * under either setting: bf16 moments load exactly, fp32 ones into a bf16 run round to nearest. */
typedef enum { ZY_ADAM_MOMENTS_F32 = 0, ZY_ADAM_MOMENTS_BF16 = 1 } zy_adam_moments;
/* Muon's momentum (optimizer.muon_momentum_dtype) takes the same two values, rounded the same way
 * with the low half of the same hashed bits (a Muon element is never an AdamW one): on a GPU 2
 * bytes an element instead of 4 (its momentum pass reads and writes 4 bytes less). */
extern const char *const zy_adam_moments_names[]; /* "float32", "bfloat16", NULL */

/* Data parallel: who updates the tied embedding (train/zero1.h). OWNER: its owner alone (its
 * gradient reduced to it, the weights broadcast after the update); REPLICATED: every rank, the
 * same update (its gradient all-reduced, nothing sent after); SPLIT (the default): every rank one
 * slice of it (its gradient reduce-scattered, the slices all-gathered after the update).
 * REPLICATED and SPLIT keep its optimizer state on every rank. */
typedef enum { ZY_EMB_OWNER = 0, ZY_EMB_REPLICATED = 1, ZY_EMB_SPLIT = 2 } zy_embedding_update;
extern const char *const zy_embedding_update_names[]; /* "owner", "replicated", "split", NULL */

/* What the optimiser does with one table entry. */
typedef enum { ZY_OPT_SKIP = 0, ZY_OPT_ADAMW = 1, ZY_OPT_MUON = 2 } zy_opt_method;

/* The GPU plan (optim_cuda.h). */
typedef struct zy_optim_cuda zy_optim_cuda;

typedef struct {
    zy_optim_config cfg;
    zy_ctx *ctx;       /* the context whose memory holds params, grads and the state */
    int64_t step;      /* steps taken; AdamW bias correction at step t uses 1 - beta^t */
    int n_params;      /* table->count at init; the table must not change afterwards */
    uint8_t *method;   /* [n_params] zy_opt_method */
    size_t *state_off; /* [n_params] offset into exp_avg/exp_avg_sq (AdamW) or momentum (Muon) */
    size_t *upd_lo, *upd_hi; /* [n_params] the elements [lo, hi) of each entry a step updates
                                (ZeRO-1's split entries: a slice; otherwise [0, numel)); an AdamW
                                entry's state holds those elements only */
    size_t *numel;           /* [n_params] each entry's elements */
    size_t *host_off;        /* [n_params] AdamW: offset of the entry's whole moments in the host
                                mirror's layout (every entry whole); Muon: state_off */
    size_t adam_host_total;  /* floats of each moment in the host layout */
    int sliced;              /* some AdamW entry holds a slice: the host layout differs */
    void *exp_avg;     /* [adam_total] AdamW first moments, laid out param by param (ctx memory):
                          fp32, or bf16 where moments_bf16 */
    void *exp_avg_sq;  /* [adam_total] AdamW second moments (ctx memory), the same type */
    int moments_bf16;  /* the live moments are bf16 (cfg.adam_moments bf16 on a GPU) */
    float *stage;      /* CUDA with bf16 moments: fp32 device staging between them and the host
                          mirror, OPTIM_STAGE_FLOATS (made at first use) */
    void *momentum;    /* [muon_total] Muon momentum buffers (ctx memory): fp32, or bf16 where
                          momentum_bf16 */
    int momentum_bf16; /* the live momentum is bf16 (cfg.muon_momentum_dtype bf16 on a GPU) */
    size_t adam_total; /* floats (each tensor 16-float aligned) */
    size_t muon_total; /* floats */
    float *work; /* CPU: [work_floats] Muon update + Newton-Schulz workspace, largest matrix */
    size_t work_floats;
    float *host_state;       /* CUDA, or any context with a sliced entry: host mirror [2 *
                                adam_host_total + muon_total] (exp_avg, exp_avg_sq, momentum; every
                                entry whole) for checkpoints, pinned on CUDA (ops_host_alloc); NULL
                                otherwise and until first used */
    zy_optim_cuda *cuda;     /* CUDA: chunk table, Muon batches, GEMM plans, workspace */
    const int *runs_planned; /* the group array of optim_plan_runs (the caller's), or NULL */
    float (*ns_abc)[3];      /* [cfg.muon_ns_steps] (a, b, c) of each Newton-Schulz iteration */
    void *compute_copy; /* CUDA: bf16 [t->total] copy of params that each step refreshes for the
                           tensors it updates (the model's GEMM weights), or NULL */
} zy_optim;

/* Fills the defaults: lr 3e-4, betas (0.9, 0.95), eps 1e-8, wd 0.1 on matrices and embeddings,
 * Muon on (mu 0.95, Nesterov, 5 steps, MATCH_ADAMW_RMS, lr ratio 1). */
void optim_config_default(zy_optim_config *c);
/* Checks every field; an error names the field, the allowed range and the value found. */
int optim_config_check(const zy_optim_config *c);
/* Plans the optimiser for a table and allocates zeroed state in ctx's memory (CPU or CUDA; ctx
 * must outlive opt); ZY_ERR on a bad config. */
int optim_init(zy_optim *opt, zy_ctx *ctx, const zy_optim_config *cfg, const zy_param_table *t);
/* ZeRO-1: the optimizer of the table entries i with mine[i] != 0 only (state for them, updates
 * of them); the others are left alone as buffers are. mine NULL: every entry. range NULL: each
 * step updates every element of those entries; else [2 * count]: entry i's elements
 * [range[2i], range[2i+1]) only (an AdamW entry split over ranks: its state holds that slice;
 * the host mirror, which checkpoints read and write, holds every entry whole). runs not NULL:
 * the GPU plan is by those runs (optim_plan_runs), made once. */
int optim_init_owned(zy_optim *opt, zy_ctx *ctx, const zy_optim_config *cfg,
                     const zy_param_table *t, const unsigned char *mine, const size_t *range,
                     const int *runs);
/* The optimizer state bytes entry p needs under cfg, as optim_init lays it out (16-element
 * aligned): AdamW 2 moments an element (2 bytes each for bf16 moments on a GPU, else 4), Muon one
 * momentum (2 bytes in bf16 on a GPU, else 4), buffers none. */
size_t optim_state_bytes(const zy_optim_config *cfg, const zy_param *p, int on_gpu);
/* Floats of fp32 staging between bf16 moments and the host mirror (64 MiB). */
#define OPTIM_STAGE_FLOATS ((size_t)1 << 24)
/* The time one update of p takes, relative to other tensors, in bytes of memory traffic: its
 * elementwise passes plus, for a Muon matrix, its Newton-Schulz FLOPs (each expert's matrix
 * separately) at flops_per_byte, the device's Newton-Schulz FLOP rate over its memory bandwidth
 * (OPTIM_NS_FLOPS_PER_BYTE_*). ZeRO-1 splits the tensors over ranks by it. */
double optim_update_cost(const zy_optim_config *cfg, const zy_param *p, double flops_per_byte);
/* Hopper: bf16 GEMMs at ~990 TFLOP/s over 3.35 TB/s is ~300, at Newton-Schulz's GEMM efficiency
 * (mid-sized products, ~2/3) ~200. CPU (OpenBLAS sgemm over DRAM bandwidth): ~20, measured with
 * `zayac bench train -n 2 --device cpu --preset tiny --optim muon --profile` on a 2-core machine,
 * where it makes the two ranks' optimizer phases equal (27 and 26 ms; 200 gave 24 and 65). */
#define OPTIM_NS_FLOPS_PER_BYTE_GPU 200.0
#define OPTIM_NS_FLOPS_PER_BYTE_CPU 20.0
/* Releases the state (safe after a failed init). */
void optim_free(zy_optim *opt);
/* Bytes this optimizer holds: the moments of the tensors it updates and its Newton-Schulz
 * workspace (what ZeRO-1 splits over the ranks; reported by bench train and train's start). */
double optim_bytes(const zy_optim *opt);
/* One step: step += 1, then every non-buffer tensor of params is updated from grads * grad_scale
 * (both laid out by t, [t->total] floats in opt->ctx's memory) with learning rate lr_now (AdamW)
 * or lr_now * muon_lr_ratio (Muon). grad_scale is clipping's factor (clip_factor; 1: none),
 * applied as each gradient is read, so clipping needs no pass of its own over the gradients; the
 * result has the bits of scaling grads in place first. grads is not modified. Asynchronous on a
 * CUDA context. */
void optim_step(zy_optim *opt, const zy_param_table *t, float *params, const float *grads,
                float lr_now, float grad_scale);
/* optim_step in table order, calling done(user, group[i]) after the last entry of each run of
 * consecutive entries with one group value, so the caller can queue that run's communication
 * (ZeRO-1's broadcast of the updated weights, or the step's mark of the weights a forward may
 * read) while the later runs are updated. On a CUDA context each run's AdamW tensors are one
 * launch queued before its done; when the plan is by these runs (optim_plan_runs) so are the Muon
 * tensors of its key (OPTIM_RUNS_PER_KEY runs, whose dones all come after them); otherwise, when
 * Muon tensors are updated (batched by shape over the whole table) every update is queued first,
 * then every done. */
void optim_step_runs(zy_optim *opt, const zy_param_table *t, float *params, const float *grads,
                     float lr_now, float grad_scale, const int *group,
                     void (*done)(void *user, int group), void *user);
/* Plans the GPU's Muon batches by the runs of group (as optim_step_runs forms them), so that no
 * Newton-Schulz call spans two keys, a key being OPTIM_RUNS_PER_KEY consecutive runs:
 * optim_step_runs with this group array (the caller keeps it) then queues each key's whole
 * update, Muon included, before the dones of its runs. Entries of fewer than OPTIM_RUN_MIN_ELEMS
 * elements count as the first key's (updated before every done, batched with their shape over
 * the runs). Nothing on the CPU. */
#define OPTIM_RUN_MIN_ELEMS ((size_t)1 << 23)
/* Runs whose Muon matrices share their Newton-Schulz calls (the dones of those runs come after
 * them): 16 expert matrices a call fill 4.4 waves of SYRK tiles at bench-small's n = 1024, 32
 * fill 8.7, so less of the GPU idles in a call's last wave. */
#define OPTIM_RUNS_PER_KEY 2
void optim_plan_runs(zy_optim *opt, const zy_param_table *t, const int *group);

/* CUDA: from now on each step also writes the updated tensors, rounded to bf16, at the same
 * offsets of bf16 [t->total] (the model's compute copy, model.cparams), in the same pass as the
 * update; NULL turns it off. Ignored on the CPU. */
void optim_set_compute_copy(zy_optim *opt, void *bf16_params);
/* The named state tensors in table order: "exp_avg.<param>" and "exp_avg_sq.<param>" for AdamW
 * tensors, "muon_momentum.<param>" for Muon tensors, each with the param's shape, pointing into
 * HOST memory: the state itself on the CPU, the host mirror on CUDA or with a sliced entry (a
 * sliced entry's other elements there are what the last load or optim_adam_host wrote).
 * Returns a heap array (free() it) and its length in *count. The step counter is opt->step. */
zy_state_tensor *optim_state_tensors(zy_optim *opt, const zy_param_table *t, int *count);
/* The same for table entries [first, last) only (what a ZeRO-1 rank saves: the entries it owns,
 * not those every rank updates alike). */
zy_state_tensor *optim_state_tensors_of(zy_optim *opt, const zy_param_table *t, int first, int last,
                                        int *count);
/* CUDA: makes the host mirror now (pinning takes a while: at the start of a run rather than at its
 * first checkpoint). No-op on the CPU or when it exists. */
void optim_state_mirror(zy_optim *opt);
/* 1 when optim_state_tensors' entries are the host mirror (CUDA, or a sliced entry; changed only
 * by optim_state_to_host, loads and optim_adam_host's writers), 0 when they are the live state. */
int optim_state_mirrored(const zy_optim *opt);
/* Copies the live state into the host mirror (CUDA: queued copies, one wait for the device; a
 * sliced entry's slice only); call before saving the entries of optim_state_tensors. No-op
 * without a mirror. */
void optim_state_to_host(zy_optim *opt);
/* Copies the host mirror into the live state (waits; a sliced entry's slice only); call after
 * loading the entries of optim_state_tensors. Without a mirror only bf16 moments need it: it
 * rounds what was loaded to bf16 (the GPU rounds in the copy). */
void optim_state_from_host(zy_optim *opt);
/* AdamW entry i's moment (which 0: exp_avg, 1: exp_avg_sq): the live state of its elements
 * [upd_lo, upd_hi) copied as fp32 into dst (ctx memory, upd_hi - upd_lo floats; waits), and its
 * whole host-mirror copy (makes the mirror). */
void optim_adam_live_to(zy_optim *opt, int i, int which, float *dst);
float *optim_adam_host(zy_optim *opt, int i, int which);

/* ---- the math, over flat arrays (each a future CUDA kernel) ---- */

/* AdamW on n elements of the gradient g * gscale (each product rounded to float, as if g had
 * been scaled in place): m, v moments; p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p) with
 * mhat = m / bc1, vhat = v / bc2, bc = 1 - beta^t. round_step > 0: the new m and v are rounded to
 * bf16 (optim/moments.h; the update uses the rounded values) with the bits of (round_step, the
 * element's index first + i in the parameter buffer); 0: kept in fp32. */
void optim_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, double bc1, double bc2,
                        float gscale, int64_t round_step, uint64_t first);
/* Muon momentum on n elements of the gradient g * gscale: mom = mu * mom + g; u = nesterov ?
 * g + mu * mom : mom. round_step > 0: the new mom is rounded to bf16 first (as AdamW's m, with the
 * bits of (round_step, first + i)); 0: kept in fp32. */
void optim_muon_momentum(float *u, const float *g, float *mom, size_t n, float mu, int nesterov,
                         float gscale, int64_t round_step, uint64_t first);
/* Floats of workspace optim_newton_schulz needs for a rows x cols matrix. */
size_t optim_ns_work_floats(int64_t rows, int64_t cols);
/* Orthogonalises x [rows, cols] in place: x /= (||x||_F + 1e-7), then `steps` quintic iterations
 * x = a x + (b A + c A A) x with A = x x^T and iteration t's (a, b, c) = abc[t] (ns_coef.h). When
 * rows > cols it works on the transpose (A = x^T x, x = a x + x (b A + c A A)) so the Gram matrix
 * is min(rows, cols) square. precond ZY_NS_PRECOND_AOL rescales the Gram side of the normalised x
 * and the first A (ns_coef.h). Matrix products go through cblas_sgemm. */
void optim_newton_schulz(float *x, int64_t rows, int64_t cols, int steps, const float (*abc)[3],
                         int precond, float *work);
/* The multiplier a scale rule applies to the orthogonalised update of an [out, in] matrix. */
float optim_muon_scale(zy_muon_scale rule, int64_t out, int64_t in);
/* p -= lr * (scale * u + wd * p) on n elements (wd multiplies the old p). */
void optim_apply_update(float *p, const float *u, size_t n, float lr, float scale, float wd);

#endif
