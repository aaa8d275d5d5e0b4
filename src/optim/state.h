/* Named optimiser-state tensors: how checkpoints see the state of the optimiser and of the
 * balancing controller. Each entry points into the owner's buffers, so saving copies `data` out
 * and loading copies into it after checking the shape. */
#ifndef ZY_OPTIM_STATE_H
#define ZY_OPTIM_STATE_H

#include "tensor/params.h"

#include <stddef.h>
#include <stdint.h>

#define ZY_STATE_NAME_MAX (ZY_PARAM_NAME_MAX + 64)

typedef struct {
    char name[ZY_STATE_NAME_MAX]; /* e.g. "exp_avg.model.layers.0.mlp.experts.down_proj" */
    float *data;                  /* [numel] fp32, owned by the optimiser / controller */
    int ndim;
    int64_t shape[ZY_MAX_DIMS];
    size_t numel;
} zy_state_tensor;

#endif
