/* Gradient clipping by global L2 norm over every trained tensor of a parameter table (buffers are
 * skipped). The sum of squares is accumulated in double in a fixed order (deterministic on the CPU
 * and on the GPU); a sharded (ZeRO) run all-reduces the ranks' partial sums before taking the
 * factor. The factor is not applied here: the optimizer multiplies each gradient by it as it reads
 * it (optim_step's grad_scale), which saves a pass over the gradients. grads is in ctx's memory
 * (CPU or CUDA). */
#ifndef ZY_CLIP_H
#define ZY_CLIP_H

#include "ops/ops.h"
#include "tensor/params.h"

/* Sum of squares of every non-buffer gradient (grads laid out by t, [t->total] floats). On CUDA it
 * waits for the device: the number comes back to the host. */
double clip_grad_sumsq(zy_ctx *ctx, const zy_param_table *t, const float *grads);
/* The same sum by parts of the table, each part summed as soon as its gradients are final (the
 * backward's grads_ready), the total taken once all are: part_of[i] in [0, nparts) for each entry.
 * Every partial sum has a fixed place and the total adds them in one fixed order, so the result
 * does not depend on when or on which context each part ran; it may differ from clip_grad_sumsq's
 * in the last bits (another order). CUDA only: NULL on the CPU, whose clip_grad_sumsq serves.
 * clip_parts_add queues part p on ctx; clip_parts_sumsq adds the parts on ctx (every part queued
 * there or ordered before it) and waits. t must outlive the parts; free on the ctx of _new. */
typedef struct zy_sumsq_parts zy_sumsq_parts;
zy_sumsq_parts *clip_parts_new(zy_ctx *ctx, const zy_param_table *t, const int *part_of,
                               int nparts);
void clip_parts_free(zy_ctx *ctx, zy_sumsq_parts *s);
void clip_parts_add(zy_ctx *ctx, zy_sumsq_parts *s, const float *grads, int p);
double clip_parts_sumsq(zy_ctx *ctx, zy_sumsq_parts *s);
/* The scale that clips a gradient of norm `norm` to max_norm: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off) or the norm is not finite (the caller decides to skip). */
float clip_factor(double norm, float max_norm);

#endif
