/* The cuDNN backend (graph) API, loaded at run time: libcudnn.so.9 is opened with dlopen on first
 * use and the dozen entry points zayac calls are looked up with dlsym, so a machine without cuDNN
 * builds and runs zayac (its own kernels). The headers give only types and enums (when absent at
 * build time, ZY_HAVE_CUDNN is 0 and loading reports cuDNN unavailable). Nothing newer than cuDNN
 * 9.14 is used (the GPU machine's version).
 * On top: a small operation-graph builder (tensors, pointwise, matmul, reduction, reshape) with a
 * sticky first error naming the failing call, the plan search (heuristics mode A, the first engine
 * config that finalizes, engines noted non-deterministic skipped on request) and execution. C++
 * only (ops/cuda). */
#ifndef ZY_OPS_CUDA_CUDNN_GRAPH_H
#define ZY_OPS_CUDA_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#if defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define ZY_HAVE_CUDNN 1
#endif
#endif
#ifndef ZY_HAVE_CUDNN
#define ZY_HAVE_CUDNN 0
#endif

/* Opens libcudnn.so.9 once per process (thread-safe); ZY_OK, or ZY_ERR with a runtime error
 * saying why (not installed, too old, built without the headers). Later calls return the first
 * answer. */
int cudnn_lib_load(void);
/* cudnnGetVersion() of the loaded library (91400 for 9.14.0); 0 before a successful load. */
long cudnn_lib_version(void);

#if ZY_HAVE_CUDNN

typedef cudnnBackendDescriptor_t cg_desc;

/* The entry points, valid after cudnn_lib_load succeeded. */
typedef struct {
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cg_desc *);
    cudnnStatus_t (*destroy_desc)(cg_desc);
    cudnnStatus_t (*finalize)(cg_desc);
    cudnnStatus_t (*set_attr)(cg_desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                              int64_t, const void *);
    cudnnStatus_t (*get_attr)(cg_desc const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cg_desc, cg_desc);
} cudnn_fns;
extern cudnn_fns cudnn_fn;

/* A 4-d tensor's dims and strides (in elements). */
typedef struct {
    int64_t dim[4], stride[4];
} cg_layout;

#define CG_MAX_DESC 256 /* the backward with a window, padding and bottom-right mask: ~170 */

/* A graph being built: every descriptor it created (destroyed together by cg_free, after the plan
 * that uses them), its operations in order, the next id for virtual tensors and the first error. */
typedef struct {
    cudnnHandle_t handle;
    cg_desc owned[CG_MAX_DESC];
    int nowned;
    cg_desc ops[64];
    int nops;
    int64_t next_virtual_uid;
    cudnnStatus_t status;        /* first failure (CUDNN_STATUS_SUCCESS while none) */
    char failed[160];            /* the call that failed first */
    cg_desc plan;                /* after cg_plan */
    int64_t workspace;           /* bytes the plan needs */
    int64_t engine;              /* its engine's global index */
    int engine_nondeterministic; /* 1: the engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC */
} cg_graph;

void cg_init(cg_graph *g, cudnnHandle_t handle);
/* Destroys every descriptor of g (plan included). */
void cg_free(cg_graph *g);

/* Tensors: non-virtual with the caller's uid (data passed at execution), virtual (an
 * intermediate the fused kernel keeps on chip; uids from 1000 up), or a scalar passed by value
 * (uid given; a host pointer to the value at execution). Alignment 16 bytes. */
cg_desc cg_tensor(cg_graph *g, int64_t uid, cudnnDataType_t type, cg_layout l);
cg_desc cg_virtual(cg_graph *g, cudnnDataType_t type, cg_layout l);
cg_desc cg_scalar(cg_graph *g, int64_t uid, cudnnDataType_t type);

/* y = mode(x[, b[, t]]) at precision prec (t: BINARY_SELECT's mask; y = t ? x : b); axis >= 0
 * for GEN_INDEX. */
void cg_pointwise(cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cg_desc x,
                  cg_desc b, cg_desc t, cg_desc y, int64_t axis);
/* The same into a new virtual tensor of type ytype and layout l, which it returns. */
cg_desc cg_pw(cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cg_desc x, cg_desc b,
              cg_desc t, cudnnDataType_t ytype, cg_layout l);
/* c = a b (batched over the two leading dims; fp32 accumulation); m/n/k overrides optional
 * (per-batch sequence lengths, NULL = none). */
void cg_matmul(cg_graph *g, cg_desc a, cg_desc b, cg_desc c, cg_desc m_override, cg_desc n_override,
               cg_desc k_override);
/* y = op over the dims where y is smaller than x (fp32). */
void cg_reduction(cg_graph *g, cudnnReduceTensorOp_t op, cg_desc x, cg_desc y);
/* y = x viewed with y's dims and strides (a transpose without a copy). */
void cg_reshape(cg_graph *g, cg_desc x, cg_desc y);

/* Finalizes the operation graph and builds the plan of the first engine config of heuristics
 * mode A that finalizes, skipping engines noted non-deterministic when deterministic is set; sets
 * g->plan, workspace, engine. ZY_OK, or ZY_ERR with a runtime error naming the failing call
 * (what: the graph's name for the message). */
int cg_plan(cg_graph *g, int deterministic, const char *what);

/* Runs g's plan on its handle's stream: n (uid, pointer) pairs and the workspace. ZY_OK, or ZY_ERR
 * with a runtime error naming the failing call. */
int cg_execute(cg_graph *g, int n, const int64_t *uids, void *const *ptrs, void *workspace,
               const char *what);

#endif
#endif
