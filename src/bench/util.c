/* Shared benchmark helpers (see util.h). */
#include "bench/util.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *bench_dtype_name(bench_dtype t) {
    switch (t) {
    case BENCH_BF16:
        return "bf16";
    case BENCH_FP32:
        return "fp32";
    case BENCH_TF32:
        return "tf32";
    }
    return "?";
}

int bench_dtype_parse(const char *s, bench_dtype *t) {
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16"))
        *t = BENCH_BF16;
    else if (!strcmp(s, "fp32") || !strcmp(s, "float") || !strcmp(s, "float32"))
        *t = BENCH_FP32;
    else if (!strcmp(s, "tf32"))
        *t = BENCH_TF32;
    else
        return zy_fail("unknown data type '%s' (expected bf16, fp32 or tf32)", s);
    return ZY_OK;
}

size_t bench_dtype_size(bench_dtype t) {
    return t == BENCH_BF16 ? 2 : 4;
}

int bench_parse_bytes(const char *s, size_t *out) {
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-') return zy_fail("size '%s': expected bytes like 8, 64K, 4M, 4G", s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return zy_fail("size '%s': expected bytes like 8, 64K, 4M, 4G", s);
    unsigned long long mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1ull << 10, end++;
        break;
    case 'M':
        mul = 1ull << 20, end++;
        break;
    case 'G':
        mul = 1ull << 30, end++;
        break;
    case 'T':
        mul = 1ull << 40, end++;
        break;
    default:
        break;
    }
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end) return zy_fail("size '%s': unexpected '%s' (use K, M, G)", s, end);
    if (v > SIZE_MAX / mul) return zy_fail("size '%s' is too large", s);
    *out = (size_t)(v * mul);
    return ZY_OK;
}

void bench_format_bytes(size_t b, char *buf, size_t n) {
    static const char unit[] = "BKMGT";
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0) b /= 1024, u++;
    if (u == 0)
        snprintf(buf, n, "%zuB", b);
    else
        snprintf(buf, n, "%zu%c", b, unit[u]);
}

int bench_sizes(size_t min, size_t max, size_t factor, size_t **out, int *n) {
    if (min == 0) return zy_fail("the smallest size must be at least 1 byte");
    if (min > max)
        return zy_fail("the smallest size (%zu) is larger than the largest (%zu)", min, max);
    if (factor < 2) return zy_fail("the size factor must be at least 2, got %zu", factor);
    int cap = 0;
    for (size_t s = min; s <= max; s = s > max / factor ? max + 1 : s * factor) cap++;
    size_t *v = zy_malloc(sizeof(size_t) * (size_t)cap);
    int k = 0;
    for (size_t s = min; s <= max; s = s > max / factor ? max + 1 : s * factor) v[k++] = s;
    *out = v;
    *n = k;
    return ZY_OK;
}

int bench_split_list(char *buf, char **items, int max, int *n) {
    int k = 0;
    for (char *p = buf; p && *p;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        if (*p) {
            if (k >= max) return zy_fail("list '%s...': more than %d items", buf, max);
            items[k++] = p;
        }
        p = comma ? comma + 1 : NULL;
    }
    *n = k;
    return ZY_OK;
}

void bench_machine_host(bench_machine *m) {
    if (gethostname(m->hostname, sizeof m->hostname) != 0) strcpy(m->hostname, "unknown");
    m->hostname[sizeof m->hostname - 1] = 0;
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(m->date, sizeof m->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

cJSON *bench_machine_to_json(const bench_machine *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "hostname", m->hostname);
    cJSON_AddStringToObject(o, "date", m->date);
    cJSON_AddStringToObject(o, "gpu", m->gpu);
    cJSON_AddNumberToObject(o, "gpus_visible", m->gpus);
    cJSON_AddNumberToObject(o, "sm_count", m->sm_count);
    cJSON_AddNumberToObject(o, "compute_capability", m->cc);
    cJSON_AddNumberToObject(o, "l2_bytes", (double)m->l2_bytes);
    cJSON_AddNumberToObject(o, "memory_bytes", (double)m->mem_bytes);
    cJSON_AddNumberToObject(o, "sm_clock_khz", m->clock_khz);
    cJSON_AddNumberToObject(o, "cuda_driver", m->driver);
    cJSON_AddNumberToObject(o, "cuda_runtime", m->runtime);
    cJSON_AddNumberToObject(o, "nccl", m->nccl);
    cJSON_AddNumberToObject(o, "cublaslt", m->cublaslt);
    return o;
}

static void json_str(const cJSON *o, const char *k, char *dst, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsString(v)) snprintf(dst, n, "%s", v->valuestring);
}

static double json_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

void bench_machine_from_json(const cJSON *o, bench_machine *m) {
    memset(m, 0, sizeof *m);
    if (!cJSON_IsObject(o)) return;
    json_str(o, "hostname", m->hostname, sizeof m->hostname);
    json_str(o, "date", m->date, sizeof m->date);
    json_str(o, "gpu", m->gpu, sizeof m->gpu);
    m->gpus = (int)json_num(o, "gpus_visible");
    m->sm_count = (int)json_num(o, "sm_count");
    m->cc = (int)json_num(o, "compute_capability");
    m->l2_bytes = (long long)json_num(o, "l2_bytes");
    m->mem_bytes = (long long)json_num(o, "memory_bytes");
    m->clock_khz = (int)json_num(o, "sm_clock_khz");
    m->driver = (int)json_num(o, "cuda_driver");
    m->runtime = (int)json_num(o, "cuda_runtime");
    m->nccl = (int)json_num(o, "nccl");
    m->cublaslt = (int)json_num(o, "cublaslt");
}

void bench_machine_print(FILE *f, const bench_machine *m) {
    fprintf(f, "# %s, %s: %d x %s (%d SMs, %.0f MB L2, %.0f GB), CUDA driver %d runtime %d",
            m->hostname, m->date, m->gpus, m->gpu, m->sm_count, m->l2_bytes / 1e6,
            m->mem_bytes / 1e9, m->driver, m->runtime);
    if (m->nccl) fprintf(f, ", NCCL %d", m->nccl);
    if (m->cublaslt) fprintf(f, ", cuBLASLt %d", m->cublaslt);
    fputc('\n', f);
}

int bench_write_json(const char *path, const cJSON *root) {
    char *text = cJSON_Print(root);
    if (!text) return zy_fail("%s: could not format JSON", path);
    size_t len = strlen(text);
    int rc = zy_write_file_atomic(path, text, len);
    cJSON_free(text);
    return rc;
}

int bench_read_json(const char *path, cJSON **out) {
    char *text;
    size_t len;
    ZY_TRY(zy_read_file(path, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at ? (long)(at - text) : -1;
        free(text);
        return zy_fail("%s: not valid JSON (error near byte %ld)", path, off);
    }
    free(text);
    *out = root;
    return ZY_OK;
}

int bench_out_path(char *buf, size_t n, const char *dir, const char *name) {
    ZY_TRY(zy_mkdirs(dir));
    return zy_path_join(buf, n, dir, name);
}
