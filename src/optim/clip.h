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
/* The scale that clips a gradient of norm `norm` to max_norm: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (clipping off) or the norm is not finite (the caller decides to skip). */
float clip_factor(double norm, float max_norm);

#endif
