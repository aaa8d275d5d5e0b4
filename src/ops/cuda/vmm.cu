/* Device memory that can be given back in pieces (ops_alloc_releasable, ops_release_except): one
 * reserved virtual address range, each granule (2 MiB on Hopper) of it backed by its own physical
 * allocation through the driver's virtual memory management, so a granule can be unmapped and
 * freed while the addresses around it stay valid. ZeRO-1 on GPUs uses it for the fp32 masters:
 * every offset into the flat weight buffer keeps its meaning, and the pages of other ranks'
 * matrices go back to the device once nothing reads them (a stray read of one is a device fault,
 * not a wrong number).
 *
 * The driver's functions come through the runtime's entry-point query (CUDA 12.5 or later), so
 * nothing links libcuda: a binary built with CUDA still starts where the driver is absent. Where
 * the entry points or the device's support are missing, the memory is plain cudaMalloc memory
 * and ops_release_except gives nothing back (the job then needs the memory of whole masters). */
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"

#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addr_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*granularity_fn)(size_t *, const CUmemAllocationProp *,
                                   CUmemAllocationGranularity_flags);
typedef CUresult (*device_fn)(CUdevice *, int);
typedef CUresult (*attribute_fn)(int *, CUdevice_attribute, CUdevice);

static struct {
    reserve_fn reserve;
    addr_free_fn addr_free;
    create_fn create;
    release_fn release;
    map_fn map;
    unmap_fn unmap;
    access_fn access;
    granularity_fn granularity;
    device_fn device;
    attribute_fn attribute;
} drv;

/* One releasable allocation: granule i of [base, base + bytes) is handle[i] (0 once given back). */
typedef struct vmm_block {
    CUdeviceptr base;
    size_t bytes, granule, n;
    CUmemGenericAllocationHandle *handle;
    struct vmm_block *next;
} vmm_block;

static vmm_block *blocks; /* every live allocation, of any device */
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_ok;

#define VMM_SYM(field, name)                                                                       \
    do {                                                                                           \
        cudaDriverEntryPointQueryResult q;                                                         \
        void *fn = NULL;                                                                           \
        if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) !=           \
                cudaSuccess ||                                                                     \
            q != cudaDriverEntryPointSuccess || !fn)                                               \
            return;                                                                                \
        memcpy(&drv.field, &fn, sizeof fn);                                                        \
    } while (0)

static void load_driver(void) {
    VMM_SYM(reserve, "cuMemAddressReserve");
    VMM_SYM(addr_free, "cuMemAddressFree");
    VMM_SYM(create, "cuMemCreate");
    VMM_SYM(release, "cuMemRelease");
    VMM_SYM(map, "cuMemMap");
    VMM_SYM(unmap, "cuMemUnmap");
    VMM_SYM(access, "cuMemSetAccess");
    VMM_SYM(granularity, "cuMemGetAllocationGranularity");
    VMM_SYM(device, "cuDeviceGet");
    VMM_SYM(attribute, "cuDeviceGetAttribute");
    drv_ok = 1;
}

static void check_cu(CUresult r, const char *what, size_t bytes) {
    if (r == CUDA_SUCCESS) return;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        zy_fatal_runtime_at(__FILE__, __LINE__, what,
                            "out of GPU memory: asked for %.2f GiB, %.2f GiB free of %.2f GiB",
                            bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
    zy_fatal_runtime_at(__FILE__, __LINE__, what,
                        "driver error %d (%.2f GiB asked; %.2f GiB free of %.2f GiB)", (int)r,
                        bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
}

/* Whether the device of ctx maps memory granule by granule (some virtualised GPUs do not). */
static int vmm_supported(const zy_ctx *ctx) {
    CUdevice dev;
    int on = 0;
    if (drv.device(&dev, ctx->gpu) != CUDA_SUCCESS ||
        drv.attribute(&on, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
            CUDA_SUCCESS)
        return 0;
    return on;
}

static CUmemAllocationProp device_prop(int gpu) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = gpu;
    return prop;
}

void *cuda_ops_alloc_releasable(zy_ctx *ctx, size_t bytes) {
    pthread_once(&drv_once, load_driver);
    if (!drv_ok || !vmm_supported(ctx)) /* plain memory: nothing can go back later */
        return cuda_ops_alloc(ctx, bytes);
    const CUmemAllocationProp prop = device_prop(ctx->gpu);
    vmm_block *b = (vmm_block *)zy_calloc(1, sizeof *b);
    check_cu(drv.granularity(&b->granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
             "cuMemGetAllocationGranularity", bytes);
    b->n = (bytes + b->granule - 1) / b->granule;
    if (b->n == 0) b->n = 1;
    b->bytes = b->n * b->granule;
    b->handle = (CUmemGenericAllocationHandle *)zy_calloc(b->n, sizeof *b->handle);
    check_cu(drv.reserve(&b->base, b->bytes, b->granule, 0, 0), "cuMemAddressReserve", bytes);
    for (size_t i = 0; i < b->n; i++) {
        check_cu(drv.create(&b->handle[i], b->granule, &prop, 0), "cuMemCreate", bytes);
        check_cu(drv.map(b->base + i * b->granule, b->granule, 0, b->handle[i], 0), "cuMemMap",
                 bytes);
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check_cu(drv.access(b->base, b->bytes, &acc, 1), "cuMemSetAccess", bytes);
    void *p = (void *)(uintptr_t)b->base;
    ZY_CUDA_CHECK(cudaMemsetAsync(p, 0, b->bytes, cuda_stream(ctx)));
    ZY_CUDA_CHECK(cudaStreamSynchronize(cuda_stream(ctx)));
    pthread_mutex_lock(&blocks_lock);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&blocks_lock);
    return p;
}

static vmm_block *find_block(const void *p) {
    pthread_mutex_lock(&blocks_lock);
    vmm_block *b = blocks;
    while (b && (void *)(uintptr_t)b->base != p) b = b->next;
    pthread_mutex_unlock(&blocks_lock);
    return b;
}

/* Orders {first, count} pairs by first byte. */
static int cmp_first(const void *a, const void *b) {
    const size_t x = ((const size_t *)a)[0], y = ((const size_t *)b)[0];
    return x < y ? -1 : x > y;
}

size_t cuda_ops_release_except(zy_ctx *ctx, void *p, size_t bytes, const size_t (*keep)[2],
                               int nkeep) {
    vmm_block *b = find_block(p);
    if (!b) return bytes; /* plain memory (no driver entry points): nothing can go back */
    ZY_CUDA_CHECK(cudaDeviceSynchronize()); /* nothing may still read what is unmapped */
    size_t(*k)[2] = (size_t(*)[2])zy_calloc((size_t)nkeep + 1, sizeof *k);
    int nk = 0;
    for (int i = 0; i < nkeep; i++)
        if (keep[i][1] > 0) memcpy(k[nk++], keep[i], sizeof *k);
    qsort(k, (size_t)nk, sizeof *k, cmp_first);
    size_t kept = 0;
    int j = 0;
    for (size_t i = 0; i < b->n; i++) {
        const size_t lo = i * b->granule, hi = lo + b->granule;
        while (j < nk && k[j][0] + k[j][1] <= lo) j++; /* ranges ending before the granule */
        const int needed = j < nk && k[j][0] < hi;
        if (needed || !b->handle[i]) {
            kept += b->handle[i] ? b->granule : 0;
            continue;
        }
        check_cu(drv.unmap(b->base + lo, b->granule), "cuMemUnmap", b->granule);
        check_cu(drv.release(b->handle[i]), "cuMemRelease", b->granule);
        b->handle[i] = 0;
    }
    free(k);
    (void)ctx;
    return kept < bytes ? kept : bytes;
}

int cuda_ops_free_releasable(zy_ctx *ctx, void *p) {
    vmm_block *b = find_block(p);
    if (!b) return 0;
    ZY_CUDA_CHECK(cudaDeviceSynchronize()); /* any stream (NCCL's too) may still use it */
    pthread_mutex_lock(&blocks_lock);
    vmm_block **at = &blocks;
    while (*at != b) at = &(*at)->next;
    *at = b->next;
    pthread_mutex_unlock(&blocks_lock);
    for (size_t i = 0; i < b->n; i++) {
        if (!b->handle[i]) continue;
        check_cu(drv.unmap(b->base + i * b->granule, b->granule), "cuMemUnmap", b->granule);
        check_cu(drv.release(b->handle[i]), "cuMemRelease", b->granule);
    }
    check_cu(drv.addr_free(b->base, b->bytes), "cuMemAddressFree", b->bytes);
    free(b->handle);
    free(b);
    return 1;
}
