/* The operation graphs of cuDNN's fused attention (attention_cudnn.cu's plans run them): the
 * forward and the backward as cudnn-frontend's composite SDPA nodes lay them out (the fusion engine
 * matches these patterns), for zayac's token-major rows; the backward over all rows or over one
 * chunk of query rows with the bottom-right-aligned causal mask. Internal to attention_cudnn. */
#ifndef ZY_OPS_CUDA_ATTENTION_CUDNN_GRAPHS_H
#define ZY_OPS_CUDA_ATTENTION_CUDNN_GRAPHS_H

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cudnn_graph.h"

#if ZY_HAVE_CUDNN
/* The unique ids of the tensors the caller passes (virtual ones count from 1000). */
enum {
    U_Q = 1,
    U_K,
    U_V,
    U_O,
    U_STATS,
    U_SCALE,
    U_NEG_INF,
    U_WINDOW,
    U_DO,
    U_DQ,
    U_DK,
    U_DV,
    U_ROWSUM,
    U_ONE,
    U_SEQ_Q,
    U_SEQ_KV,
    U_DQ_ACCUM,
    U_SQ,      /* bottom-right alignment: s_q (int32 by value) */
    U_SKV,     /* and s_kv */
    U_WINDOW_I /* the window as int32, bottom-right with sequence lengths */
};

/* The rows a backward graph covers: Tq query rows and Tkv key rows (from the pointers the caller
 * passes) of sequences T tokens apart; br: the bottom-right-aligned mask (Tkv > Tq); pad: the
 * padding-mask workaround. The single pass is Tq = Tkv = T. */
typedef struct {
    int64_t Tq, Tkv, T;
    int br, pad;
} bwd_rows;

/* out = softmax(mask(scale q k^T)) v and the stats (lse), over all T rows of sh. */
void attn_graph_fwd(cg_graph *g, const cudnn_attn_shape *sh);
/* dq, dk, dv over the rows r names, deterministic when sh says so (attention_cudnn_graphs.cu). */
void attn_graph_bwd(cg_graph *g, const cudnn_attn_shape *sh, const bwd_rows *r);
#endif

#endif
