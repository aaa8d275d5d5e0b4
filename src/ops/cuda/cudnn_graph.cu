/* libcudnn.so.9 opened at run time, and the operation-graph builder, plan search and execution of
 * the cuDNN backend API (cudnn_graph.h). */
#include "ops/cuda/cudnn_graph.h"

#include "base/err.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512]; /* why the library is unusable ("" when loaded) */
static long loaded_version;

#if !ZY_HAVE_CUDNN

static void load(void) {
    snprintf(load_error, sizeof load_error,
             "cuDNN unavailable: zayac was built without the cuDNN headers (cudnn_graph.h)");
}

#else

cudnn_fns cudnn_fn;

/* The oldest library the graphs are written for: -inf masks, the backward's softmax_sum
 * workspace and dQ accumulator zeroed by cuDNN (9.6), and 9.10.0/9.10.1 refused (see
 * attention_cudnn.cu). */
#define CUDNN_MIN_VERSION 90600

static void load(void) {
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cuDNN unavailable: dlopen(libcudnn.so.9): %s",
                 dlerror());
        return;
    }
    size_t (*get_version)(void) = (size_t(*)(void))dlsym(lib, "cudnnGetVersion");
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cudnnCreate", (void **)&cudnn_fn.create},
        {"cudnnDestroy", (void **)&cudnn_fn.destroy},
        {"cudnnSetStream", (void **)&cudnn_fn.set_stream},
        {"cudnnGetErrorString", (void **)&cudnn_fn.error_string},
        {"cudnnGetLastErrorString", (void **)&cudnn_fn.last_error},
        {"cudnnBackendCreateDescriptor", (void **)&cudnn_fn.create_desc},
        {"cudnnBackendDestroyDescriptor", (void **)&cudnn_fn.destroy_desc},
        {"cudnnBackendFinalize", (void **)&cudnn_fn.finalize},
        {"cudnnBackendSetAttribute", (void **)&cudnn_fn.set_attr},
        {"cudnnBackendGetAttribute", (void **)&cudnn_fn.get_attr},
        {"cudnnBackendExecute", (void **)&cudnn_fn.execute},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(lib, syms[i].name);
        if (!*syms[i].slot || !get_version) {
            snprintf(load_error, sizeof load_error, "cuDNN unavailable: libcudnn.so.9 has no %s",
                     syms[i].name);
            dlclose(lib);
            return;
        }
    }
    long v = (long)get_version();
    if (v < CUDNN_MIN_VERSION) {
        snprintf(load_error, sizeof load_error,
                 "cuDNN unavailable: libcudnn.so.9 is version %ld, zayac needs %d or newer", v,
                 CUDNN_MIN_VERSION);
        dlclose(lib);
        return;
    }
    loaded_version = v; /* the library stays open for the life of the process */
}

#endif

int cudnn_lib_load(void) {
    pthread_once(&load_once, load);
    return loaded_version ? ZY_OK : zy_fail_runtime("%s", load_error);
}

long cudnn_lib_version(void) {
    return loaded_version;
}

#if ZY_HAVE_CUDNN

/* ---- the builder ---- */

/* Records the first failure of g: the call, cuDNN's name for the status and its last message. */
static int cg_ok(cg_graph *g, cudnnStatus_t st, const char *call) {
    if (st == CUDNN_STATUS_SUCCESS) return 1;
    if (g->status == CUDNN_STATUS_SUCCESS) {
        char detail[256] = "";
        cudnn_fn.last_error(detail, sizeof detail);
        g->status = st;
        snprintf(g->failed, sizeof g->failed, "%s: %s%s%s", call, cudnn_fn.error_string(st),
                 detail[0] ? ": " : "", detail);
    }
    return 0;
}

#define CG_SET(g, d, attr, type, n, ptr)                                                           \
    cg_ok(g, cudnn_fn.set_attr(d, attr, type, n, ptr), "cudnnBackendSetAttribute(" #attr ")")
#define CG_FINALIZE(g, d, what) cg_ok(g, cudnn_fn.finalize(d), "cudnnBackendFinalize(" what ")")

/* A new descriptor owned by g; NULL after an earlier failure. */
static cg_desc cg_new(cg_graph *g, cudnnBackendDescriptorType_t type, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->nowned == CG_MAX_DESC) {
        cg_ok(g, CUDNN_STATUS_INTERNAL_ERROR, "cg_new: more descriptors than CG_MAX_DESC");
        return NULL;
    }
    cg_desc d = NULL;
    if (!cg_ok(g, cudnn_fn.create_desc(type, &d), what)) return NULL;
    g->owned[g->nowned++] = d;
    return d;
}

void cg_init(cg_graph *g, cudnnHandle_t handle) {
    memset(g, 0, sizeof *g);
    g->handle = handle;
    g->next_virtual_uid = 1000;
    g->status = CUDNN_STATUS_SUCCESS;
}

void cg_free(cg_graph *g) {
    if (g->plan) cudnn_fn.destroy_desc(g->plan);
    for (int i = g->nowned - 1; i >= 0; i--) cudnn_fn.destroy_desc(g->owned[i]);
    g->nowned = g->nops = 0;
    g->plan = NULL;
}

static cg_desc cg_tensor_desc(cg_graph *g, int64_t uid, cudnnDataType_t type, cg_layout l,
                              bool is_virtual, bool by_value) {
    cg_desc d = cg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor");
    if (!d) return NULL;
    const int64_t align = 16;
    CG_SET(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    CG_SET(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dim);
    CG_SET(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.stride);
    CG_SET(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    CG_SET(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (is_virtual) CG_SET(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) CG_SET(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    CG_FINALIZE(g, d, "tensor");
    return g->status == CUDNN_STATUS_SUCCESS ? d : NULL;
}

cg_desc cg_tensor(cg_graph *g, int64_t uid, cudnnDataType_t type, cg_layout l) {
    return cg_tensor_desc(g, uid, type, l, false, false);
}

cg_desc cg_virtual(cg_graph *g, cudnnDataType_t type, cg_layout l) {
    return cg_tensor_desc(g, g->next_virtual_uid++, type, l, true, false);
}

cg_desc cg_scalar(cg_graph *g, int64_t uid, cudnnDataType_t type) {
    const cg_layout one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    return cg_tensor_desc(g, uid, type, one, false, true);
}

/* Appends a finalized operation to g's list. */
static void cg_add_op(cg_graph *g, cg_desc op, const char *what) {
    if (!op || !cg_ok(g, cudnn_fn.finalize(op), what)) return;
    if (g->nops == (int)(sizeof g->ops / sizeof g->ops[0])) {
        cg_ok(g, CUDNN_STATUS_INTERNAL_ERROR, "cg_add_op: too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

void cg_pointwise(cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cg_desc x,
                  cg_desc b, cg_desc t, cg_desc y, int64_t axis) {
    cg_desc pw = cg_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise");
    if (!pw || !x || !y) return;
    CG_SET(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CG_SET(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) CG_SET(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    CG_FINALIZE(g, pw, "pointwise");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "create pointwise op");
    if (!op) return;
    const float one = 1.0f;
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           &pw);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    cg_add_op(g, op, "pointwise op");
}

cg_desc cg_pw(cg_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cg_desc x, cg_desc b,
              cg_desc t, cudnnDataType_t ytype, cg_layout l) {
    cg_desc y = cg_virtual(g, ytype, l);
    cg_pointwise(g, mode, prec, x, b, t, y, -1);
    return y;
}

void cg_matmul(cg_graph *g, cg_desc a, cg_desc b, cg_desc c, cg_desc m_override, cg_desc n_override,
               cg_desc k_override) {
    cg_desc mm = cg_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "create matmul");
    if (!mm || !a || !b || !c) return;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    CG_SET(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CG_FINALIZE(g, mm, "matmul");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "create matmul op");
    if (!op) return;
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    if (m_override)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_override);
    if (n_override)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_override);
    if (k_override)
        CG_SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_override);
    cg_add_op(g, op, "matmul op");
}

void cg_reduction(cg_graph *g, cudnnReduceTensorOp_t red, cg_desc x, cg_desc y) {
    cg_desc rd = cg_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "create reduction");
    if (!rd || !x || !y) return;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    CG_SET(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    CG_SET(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
    CG_FINALIZE(g, rd, "reduction");
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "create reduction op");
    if (!op) return;
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    cg_add_op(g, op, "reduction op");
}

void cg_reshape(cg_graph *g, cg_desc x, cg_desc y) {
    cg_desc op = cg_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "create reshape op");
    if (!op || !x || !y) return;
    CG_SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cg_add_op(g, op, "reshape op");
}

/* ---- plans ---- */

/* 1 when engine config cfg's engine carries the non-deterministic note; its global index in
 * *index. -1 when the query failed. */
static int cg_engine_nondeterministic(cg_graph *g, cg_desc cfg, int64_t *index) {
    cg_desc engine = cg_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "create engine");
    int64_t n = 0;
    if (!engine || !cg_ok(g,
                          cudnn_fn.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine),
                          "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINECFG_ENGINE)"))
        return -1;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (!cg_ok(g,
               cudnn_fn.get_attr(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                                 notes),
               "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)"))
        return -1;
    *index = -1;
    cudnn_fn.get_attr(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, index);
    for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

static int cg_fail(cg_graph *g, const char *what) {
    return zy_fail_runtime("cuDNN %s: %s", what, g->failed);
}

int cg_plan(cg_graph *g, int deterministic, const char *what) {
    cg_desc graph = cg_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph");
    if (graph) {
        CG_SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops,
               g->ops);
        CG_SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
        CG_FINALIZE(g, graph, "operation graph");
    }
    cg_desc heur = cg_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create engine heuristics");
    int64_t count = 0;
    if (heur) {
        const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
        CG_SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &graph);
        CG_SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        CG_FINALIZE(g, heur, "engine heuristics");
        if (g->status == CUDNN_STATUS_SUCCESS)
            cg_ok(g,
                  cudnn_fn.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
                  "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS count)");
    }
    if (g->status != CUDNN_STATUS_SUCCESS) return cg_fail(g, what);
    if (count <= 0) return zy_fail_runtime("cuDNN %s: heuristics offer no engine", what);
    if (count > 16) count = 16;
    cg_desc cfgs[16];
    for (int64_t i = 0; i < count; i++)
        cfgs[i] = cg_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine config");
    int64_t got = 0;
    if (g->status == CUDNN_STATUS_SUCCESS)
        cg_ok(g,
              cudnn_fn.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &got, cfgs),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)");
    if (g->status != CUDNN_STATUS_SUCCESS) return cg_fail(g, what);
    char tried[256] = "";
    size_t used = 0;
    for (int64_t i = 0; i < got && i < count; i++) {
        int64_t index = -1;
        int nondet = cg_engine_nondeterministic(g, cfgs[i], &index);
        if (nondet < 0) return cg_fail(g, what);
        if (deterministic && nondet) {
            used += (size_t)snprintf(tried + used, used < sizeof tried ? sizeof tried - used : 0,
                                     "%sengine %lld is non-deterministic", used ? "; " : "",
                                     (long long)index);
            continue;
        }
        cg_desc plan = NULL;
        cudnnStatus_t st = cudnn_fn.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (!cg_ok(g, st, "create execution plan")) return cg_fail(g, what);
        st = cudnn_fn.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                               &g->handle);
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnn_fn.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnn_fn.finalize(plan);
        int64_t ws = 0, n = 0;
        if (st == CUDNN_STATUS_SUCCESS)
            st = cudnn_fn.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                   1, &n, &ws);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnn_fn.destroy_desc(plan);
            used += (size_t)snprintf(tried + used, used < sizeof tried ? sizeof tried - used : 0,
                                     "%sengine %lld: %s", used ? "; " : "", (long long)index,
                                     cudnn_fn.error_string(st));
            continue;
        }
        g->plan = plan;
        g->workspace = ws;
        g->engine = index;
        g->engine_nondeterministic = nondet;
        return ZY_OK;
    }
    return zy_fail_runtime("cuDNN %s: no engine config builds a plan (%s)", what,
                           used ? tried : "none offered");
}

int cg_execute(cg_graph *g, int n, const int64_t *uids, void *const *ptrs, void *workspace,
               const char *what) {
    cg_desc pack = NULL;
    cudnnStatus_t st = cudnn_fn.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    const char *call = "create variant pack";
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)";
        st = cudnn_fn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)";
        st = cudnn_fn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                               ptrs);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_WORKSPACE)";
        st = cudnn_fn.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                               &workspace);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendFinalize(variant pack)";
        st = cudnn_fn.finalize(pack);
    }
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendExecute";
        st = cudnn_fn.execute(g->handle, g->plan, pack);
    }
    if (pack) cudnn_fn.destroy_desc(pack);
    if (st == CUDNN_STATUS_SUCCESS) return ZY_OK;
    char detail[256] = "";
    cudnn_fn.last_error(detail, sizeof detail);
    return zy_fail_runtime("cuDNN %s: %s: %s%s%s", what, call, cudnn_fn.error_string(st),
                           detail[0] ? ": " : "", detail);
}

#endif
