/* A kernel timeline without nsys (the GPU machines have none): a CUPTI injection library. The
 * CUDA driver loads it when CUDA_INJECTION64_PATH names it and calls InitializeInjection; every
 * kernel's record (start, end, when the host queued and submitted it, stream, hardware channel,
 * grid, block, cluster, name) goes to $ZYTRACE_OUT.<pid>.tsv when the process exits.
 * With ZYTRACE_API=1 every CUDA runtime and driver call (start, end, name) goes to
 * $ZYTRACE_OUT.<pid>.api.tsv too: where the host's time between launches goes.
 * dev/trace/kernel_trace_summary.py reads the files. Built and run by
 * dev/scripts/gpu_kernel_trace.sh. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUFFER_BYTES ((size_t)16 << 20)

static FILE *out, *api_out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    CUpti_Activity *rec = NULL;
    while (out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if ((rec->kind == CUPTI_ACTIVITY_KIND_DRIVER || rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME) &&
            api_out) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
            const char *name = NULL;
            CUpti_CallbackDomain dom = rec->kind == CUPTI_ACTIVITY_KIND_DRIVER
                                           ? CUPTI_CB_DOMAIN_DRIVER_API
                                           : CUPTI_CB_DOMAIN_RUNTIME_API;
            if (cuptiGetCallbackName(dom, a->cbid, &name) != CUPTI_SUCCESS) name = NULL;
            fprintf(api_out, "%llu\t%llu\t%u\t%s\n", (unsigned long long)a->start,
                    (unsigned long long)a->end, a->threadId, name ? name : "?");
            continue;
        }
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(out, "%llu\t%llu\t%llu\t%llu\t%u\t%u\t%d\t%d\t%u\t%s\n",
                (unsigned long long)k->start, (unsigned long long)k->end,
                (unsigned long long)k->queued, (unsigned long long)k->submitted, k->streamId,
                k->channelID, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                k->clusterX * k->clusterY * k->clusterZ, k->name ? k->name : "?");
    }
    free(buffer);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    if (out) fclose(out);
    if (api_out) fclose(api_out);
    out = api_out = NULL;
}

int InitializeInjection(void);
int InitializeInjection(void) {
    const char *prefix = getenv("ZYTRACE_OUT");
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.tsv", prefix ? prefix : "/tmp/zytrace", (int)getpid());
    out = fopen(path, "w");
    if (!out) return 0;
    fprintf(out, "start\tend\tqueued\tsubmitted\tstream\tchannel\tgrid\tblock\tcluster\tname\n");
    cuptiActivityEnableLatencyTimestamps(1);
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    const char *api = getenv("ZYTRACE_API");
    if (api && api[0] == '1') {
        snprintf(path, sizeof path, "%s.%d.api.tsv", prefix ? prefix : "/tmp/zytrace",
                 (int)getpid());
        api_out = fopen(path, "w");
        if (api_out) {
            fprintf(api_out, "start\tend\tthread\tname\n");
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
        }
    }
    atexit(flush_at_exit);
    return 1;
}
