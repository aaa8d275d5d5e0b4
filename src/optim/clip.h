/* Gradient clipping by global L2 norm over every trained tensor of a parameter table (buffers are
 * skipped). The sum of squares is accumulated in double in a fixed order (deterministic on the CPU
 * and on the GPU). Split into sum-of-squares and scale so a sharded (ZeRO) run can all-reduce the
 * partial sums in between. grads is in ctx's memory (CPU or CUDA). */
#ifndef ZY_CLIP_H
#define ZY_CLIP_H

#include "ops/ops.h"
#include "tensor/params.h"

/* Sum of squares of every non-buffer gradient (grads laid out by t, [t->total] floats). On CUDA it
 * waits for the device: the number comes back to the host. */
double clip_grad_sumsq(zy_ctx *ctx, const zy_param_table *t, const float *grads);
/* Multiplies every non-buffer gradient by scale (asynchronous on CUDA). */
void clip_scale_grads(zy_ctx *ctx, const zy_param_table *t, float *grads, float scale);
/* The scale that clips a gradient of norm `norm` to max_norm: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off) or the norm is not finite (the caller decides to skip). */
float clip_factor(double norm, float max_norm);
/* Computes the global norm, scales grads in place when it exceeds max_norm, and returns the
 * pre-clip norm (NaN or inf when a gradient is; grads are then left as they are). */
double clip_grad_norm(zy_ctx *ctx, const zy_param_table *t, float *grads, float max_norm);

#endif
