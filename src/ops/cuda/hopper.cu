/* The Hopper kernels' device check (hopper.h). */
#include "ops/cuda/hopper.h"

#include "ops/cuda/wgmma.h"

#include <cuda_runtime.h>

/* *flag = 1 when this build compiled sm_90a kernel bodies, else 0. */
__global__ static void hopper_probe(int *flag) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *flag = 1;
#else
    *flag = 0;
#endif
}

int cuda_hopper_device(cuda_hopper_cache *c, size_t smem, int (*set_attrs)(void), int *sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CUDA_HOPPER_MAX_DEV) return -1;
    pthread_mutex_lock(&c->lock);
    if (!c->known[dev]) {
        int major = 0, minor = 0, optin = 0, ok = 0, *flag = NULL;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
                cudaSuccess &&
            cudaDeviceGetAttribute(&c->sms[dev], cudaDevAttrMultiProcessorCount, dev) ==
                cudaSuccess &&
            major == 9 && minor == 0 && (size_t)optin >= smem && encode_tiled() &&
            cudaMalloc(&flag, sizeof *flag) == cudaSuccess) {
            /* the bodies exist only in an sm_90a build (Makefile CUDA_ARCH): ask the device */
            int h = 0;
            hopper_probe<<<1, 1>>>(flag);
            ok = cudaMemcpy(&h, flag, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h == 1 &&
                 set_attrs();
        }
        if (flag) cudaFree(flag);
        (void)cudaGetLastError(); /* a failed probe leaves no error behind for the next call */
        c->ok[dev] = ok;
        c->known[dev] = 1;
    }
    const int ok = c->ok[dev];
    if (sms) *sms = c->sms[dev];
    pthread_mutex_unlock(&c->lock);
    return ok ? dev : -1;
}
