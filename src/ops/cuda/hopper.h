/* Whether the current device runs this build's Hopper (sm_90a) kernels (syrk.cu,
 * grouped_gemm.cu): compute capability 9.0, enough opt-in shared memory, the driver's tensor-map
 * encoder, and kernel bodies compiled for sm_90a (asked of the device with a probe kernel). Each
 * caller keeps its own cache, since its kernels' shared-memory attributes are set once per
 * device. C++ only. */
#ifndef ZY_OPS_CUDA_HOPPER_H
#define ZY_OPS_CUDA_HOPPER_H

#include <pthread.h>
#include <stddef.h>

#define CUDA_HOPPER_MAX_DEV 64

/* Per device: known (asked), ok (the kernels run), sms (its SM count); under one lock, since
 * threads of one process may drive different GPUs. */
typedef struct {
    pthread_mutex_t lock;
    int known[CUDA_HOPPER_MAX_DEV], ok[CUDA_HOPPER_MAX_DEV], sms[CUDA_HOPPER_MAX_DEV];
} cuda_hopper_cache;

#define CUDA_HOPPER_CACHE_INIT                                                                     \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, {0}, {0}, {                                                     \
            0                                                                                      \
        }                                                                                          \
    }

/* The current device's index when it runs sm_90a kernels needing `smem` bytes of shared memory
 * per block, with set_attrs (the caller's cudaFuncSetAttribute calls; 1 on success) run once per
 * device; -1 when it cannot. *sms (may be NULL) gets its SM count. */
int cuda_hopper_device(cuda_hopper_cache *c, size_t smem, int (*set_attrs)(void), int *sms);

#endif
