/* The parameter table: every named tensor of a model (HF names), its shape and its offset into one
 * flat fp32 buffer. Parameters, gradients and optimiser moments are each one allocation laid out by
 * this table. */
#ifndef ZY_PARAMS_H
#define ZY_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#define ZY_PARAM_NAME_MAX 96
#define ZY_MAX_DIMS       4

/* How the optimiser treats a tensor. */
typedef enum {
    ZY_PARAM_MATRIX = 0, /* hidden 2-D weight (or [E,out,in] stack of them): Muon-eligible */
    ZY_PARAM_EMBED = 1,  /* embedding / tied head: AdamW */
    ZY_PARAM_VECTOR = 2, /* norms, scales, biases, temperatures: AdamW, no weight decay */
    ZY_PARAM_CONV = 3,   /* convolution kernels: AdamW */
    ZY_PARAM_BUFFER = 4, /* not trained by gradients (balancing biases) */
} zy_param_kind;

typedef struct {
    char name[ZY_PARAM_NAME_MAX];
    int ndim;
    int64_t shape[ZY_MAX_DIMS];
    size_t offset; /* in floats, into the flat buffer */
    size_t numel;
    zy_param_kind kind;
    int layer; /* -1 for global tensors */
} zy_param;

typedef struct {
    zy_param *items;
    int count, cap;
    size_t total;  /* floats */
    int pack_next; /* 1: the next tensor starts right after the previous one (no padding) */
    int overflow;  /* 1: an element count or the total passed SIZE_MAX (total is then SIZE_MAX);
                      a config that makes one is refused by config_validate */
} zy_param_table;

void params_init(zy_param_table *t);
void params_free(zy_param_table *t);
/* Appends a tensor (shape of ndim dims) and returns its index; offsets are 16-float aligned.
 * Sizes are computed with overflow checks: one that does not fit size_t sets t->overflow. */
int params_add(zy_param_table *t, const char *name, int ndim, const int64_t *shape,
               zy_param_kind kind, int layer);
/* Makes the next params_add start exactly where the previous tensor ends, so the two can be used
 * as one matrix (q_proj and k_proj rows form one [(Hq+Hk)*d, D] weight for a single GEMM). */
void params_pack_next(zy_param_table *t);
/* Index of a name, or -1. */
int params_find(const zy_param_table *t, const char *name);
/* Formats a shape as "[a, b, c]" into buf. */
void params_shape_str(const zy_param *p, char *buf, size_t n);

#endif
