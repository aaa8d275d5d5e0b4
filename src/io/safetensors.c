/* safetensors reading (mmap + validation) and atomic writing (see safetensors.h). */
#include "io/safetensors.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

/* The reference implementation refuses headers above 100 MB; so do we (a corrupt length field
 * must not make us parse gigabytes). */
#define ST_MAX_HEADER 100000000ull
/* Integers in the header are read through doubles: exact up to 2^53. */
#define ST_MAX_INT 9007199254740992.0

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ZY_ST_DTYPE_COUNT] = {
    [ZY_ST_F32] = {"F32", 4},   [ZY_ST_BF16] = {"BF16", 2},       [ZY_ST_F16] = {"F16", 2},
    [ZY_ST_I32] = {"I32", 4},   [ZY_ST_I64] = {"I64", 8},         [ZY_ST_F64] = {"F64", 8},
    [ZY_ST_BOOL] = {"BOOL", 1}, [ZY_ST_U8] = {"U8", 1},           [ZY_ST_I8] = {"I8", 1},
    [ZY_ST_I16] = {"I16", 2},   [ZY_ST_U16] = {"U16", 2},         [ZY_ST_U32] = {"U32", 4},
    [ZY_ST_U64] = {"U64", 8},   [ZY_ST_F8_E4M3] = {"F8_E4M3", 1}, [ZY_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *safetensors_dtype_name(zy_st_dtype dt) {
    return (unsigned)dt < ZY_ST_DTYPE_COUNT ? st_dtypes[dt].name : "?";
}

size_t safetensors_dtype_size(zy_st_dtype dt) {
    return (unsigned)dt < ZY_ST_DTYPE_COUNT ? st_dtypes[dt].size : 0;
}

/* ---- scalar conversions ---- */

uint16_t zy_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, or NaN kept quiet with the top payload bits */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x0200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    int e = (int)(a >> 23) - 127;
    if (e >= -14) { /* normal half: keep 10 of the 23 mantissa bits */
        uint32_t h = ((uint32_t)(e + 15) << 10) | ((a & 0x7fffffu) >> 13);
        uint32_t rest = a & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carry may bump exponent */
        return (uint16_t)(sign | h);
    }
    if (e < -25) return (uint16_t)sign; /* below half the smallest subnormal: zero */
    /* Subnormal half: value / 2^-24, with the implicit bit made explicit. */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    int shift = -e - 1; /* 14..24 */
    uint32_t h = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float zy_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f)
        u = sign | 0x7f800000u | (m << 13);
    else if (e != 0)
        u = sign | ((e + 112u) << 23) | (m << 13);
    else if (m == 0)
        u = sign;
    else { /* subnormal: normalise */
        int k = 0;
        while (!(m & 0x400u)) m <<= 1, k++;
        u = sign | ((uint32_t)(113 - k) << 23) | ((m & 0x3ffu) << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- header parsing ---- */

void safetensors_close(zy_safetensors *f) {
    for (int i = 0; i < f->count; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->meta_count; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->path);
    zy_mmap_close(&f->map);
    memset(f, 0, sizeof *f);
}

/* A non-negative integer that a double holds exactly. */
static int st_json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > ST_MAX_INT || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int st_parse_dtype(const char *s, zy_st_dtype *dt) {
    for (int i = 0; i < ZY_ST_DTYPE_COUNT; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *dt = (zy_st_dtype)i;
            return 1;
        }
    return 0;
}

static int st_parse_entry(zy_safetensors *f, const cJSON *e, zy_st_tensor *t) {
    const char *path = f->path, *name = e->string;
    if (!cJSON_IsObject(e))
        return zy_fail("%s: tensor '%s': header entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!dt) return zy_fail("%s: tensor '%s': header entry has no dtype", path, name);
    if (!sh) return zy_fail("%s: tensor '%s': header entry has no shape", path, name);
    if (!off) return zy_fail("%s: tensor '%s': header entry has no data_offsets", path, name);
    if (!cJSON_IsString(dt)) return zy_fail("%s: tensor '%s': dtype is not a string", path, name);
    if (!st_parse_dtype(dt->valuestring, &t->dtype))
        return zy_fail("%s: tensor '%s': unknown dtype '%s'", path, name, dt->valuestring);
    if (!cJSON_IsArray(sh)) return zy_fail("%s: tensor '%s': shape is not a list", path, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ZY_ST_MAX_DIMS)
        return zy_fail("%s: tensor '%s': %d dimensions, at most %d supported", path, name, nd,
                       ZY_ST_MAX_DIMS);
    t->ndim = nd;
    t->numel = 1;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (!st_json_uint(d, &v))
            return zy_fail("%s: tensor '%s': shape entry %d is not a non-negative integer", path,
                           name, i);
        t->shape[i++] = (int64_t)v;
        if (v != 0 && t->numel > SIZE_MAX / v)
            return zy_fail("%s: tensor '%s': shape overflows the element count", path, name);
        t->numel *= (size_t)v;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !st_json_uint(off->child, &b) ||
        !st_json_uint(off->child->next, &en))
        return zy_fail("%s: tensor '%s': data_offsets is not a pair of non-negative integers", path,
                       name);
    if (en < b)
        return zy_fail("%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                       name, (unsigned long long)b, (unsigned long long)en);
    size_t es = st_dtypes[t->dtype].size;
    char shs[160];
    safetensors_shape_str(t->ndim, t->shape, shs, sizeof shs);
    if (t->numel > SIZE_MAX / es || en - b != (uint64_t)(t->numel * es))
        return zy_fail("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s %s needs "
                       "%zu elements x %zu bytes",
                       path, name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)(en - b), dt->valuestring, shs, t->numel, es);
    if (en > f->data_size)
        return zy_fail("%s: tensor '%s': data_offsets [%llu, %llu] run past the data region (%zu "
                       "bytes)",
                       path, name, (unsigned long long)b, (unsigned long long)en, f->data_size);
    t->begin = (size_t)b;
    t->end = (size_t)en;
    return ZY_OK;
}

static int st_parse_meta(zy_safetensors *f, const cJSON *m) {
    if (!cJSON_IsObject(m)) return zy_fail("%s: __metadata__ is not an object", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta_keys = zy_calloc((size_t)n + 1, sizeof(char *));
    f->meta_vals = zy_calloc((size_t)n + 1, sizeof(char *));
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        if (!cJSON_IsString(kv))
            return zy_fail("%s: __metadata__ value of '%s' is not a string", f->path, kv->string);
        f->meta_keys[f->meta_count] = zy_strdup(kv->string);
        f->meta_vals[f->meta_count++] = zy_strdup(kv->valuestring);
    }
    return ZY_OK;
}

static int st_cmp_range(const void *a, const void *b) {
    const zy_st_tensor *x = *(const zy_st_tensor *const *)a, *y = *(const zy_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int st_cmp_name(const void *a, const void *b) {
    return strcmp((*(const zy_st_tensor *const *)a)->name, (*(const zy_st_tensor *const *)b)->name);
}

/* The byte ranges must tile [0, data_size): sort by offset, then each begins where the last ended.
 */
static int st_check_layout(zy_safetensors *f) {
    if (f->count == 0) {
        if (f->data_size != 0)
            return zy_fail("%s: %zu data bytes but the header lists no tensor", f->path,
                           f->data_size);
        return ZY_OK;
    }
    zy_st_tensor **s = zy_malloc((size_t)f->count * sizeof *s);
    for (int i = 0; i < f->count; i++) s[i] = &f->tensors[i];
    int rc = ZY_OK;
    qsort(s, (size_t)f->count, sizeof *s, st_cmp_name);
    for (int i = 1; i < f->count && rc == ZY_OK; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0)
            rc = zy_fail("%s: tensor '%s' is listed twice in the header", f->path, s[i]->name);
    qsort(s, (size_t)f->count, sizeof *s, st_cmp_range);
    size_t at = 0;
    for (int i = 0; i < f->count && rc == ZY_OK; i++) {
        if (s[i]->begin < at)
            rc = zy_fail("%s: tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)",
                         f->path, s[i]->name, s[i]->begin, s[i]->end, s[i - 1]->name,
                         s[i - 1]->begin, s[i - 1]->end);
        else if (s[i]->begin > at)
            rc = zy_fail("%s: %zu unused bytes before tensor '%s' at data offset %zu (tensors must "
                         "cover the data region without holes)",
                         f->path, s[i]->begin - at, s[i]->name, at);
        else
            at = s[i]->end;
    }
    if (rc == ZY_OK && at != f->data_size)
        rc = zy_fail("%s: the tensors end at data offset %zu but the data region has %zu bytes "
                     "(truncated or trailing bytes)",
                     f->path, at, f->data_size);
    free(s);
    return rc;
}

static int st_parse_header(zy_safetensors *f, const char *text, size_t len) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return zy_fail("%s: header is not valid JSON (parser stopped at byte %zu of %zu)", f->path,
                       at, len);
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return zy_fail("%s: header has extra bytes after the JSON object (byte %zu)", f->path,
                           (size_t)(p - text));
        }
    int rc = ZY_OK;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zy_fail("%s: header is JSON but not an object", f->path);
    }
    int n = cJSON_GetArraySize(root);
    f->tensors = zy_calloc((size_t)n + 1, sizeof *f->tensors);
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (f->meta_keys)
                rc = zy_fail("%s: __metadata__ is listed twice", f->path);
            else
                rc = st_parse_meta(f, e);
        } else {
            zy_st_tensor *t = &f->tensors[f->count];
            t->name = zy_strdup(e->string);
            f->count++;
            rc = st_parse_entry(f, e, t);
        }
        if (rc != ZY_OK) break;
    }
    cJSON_Delete(root);
    return rc == ZY_OK ? st_check_layout(f) : rc;
}

int safetensors_open(zy_safetensors *f, const char *path) {
    memset(f, 0, sizeof *f);
    if (zy_mmap_open(&f->map, path) != ZY_OK) return ZY_ERR;
    f->path = zy_strdup(path);
    const uint8_t *p = f->map.data;
    size_t size = f->map.size;
    if (size < 8) {
        zy_fail("%s: file is %zu bytes, shorter than the 8-byte header length (truncated?)", path,
                size);
        safetensors_close(f);
        return ZY_ERR;
    }
    uint64_t n;
    memcpy(&n, p, 8);
    if (n > ST_MAX_HEADER || n > size - 8) {
        zy_fail("%s: header length %llu runs past the end of the file (%zu bytes)%s", path,
                (unsigned long long)n, size,
                n > ST_MAX_HEADER ? " and exceeds the 100 MB limit" : "");
        safetensors_close(f);
        return ZY_ERR;
    }
    f->data = p + 8 + n;
    f->data_size = size - 8 - (size_t)n;
    if (st_parse_header(f, (const char *)p + 8, (size_t)n) != ZY_OK) {
        safetensors_close(f);
        return ZY_ERR;
    }
    return ZY_OK;
}

int safetensors_find(const zy_safetensors *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return i;
    return -1;
}

const char *safetensors_meta_get(const zy_safetensors *f, const char *key) {
    for (int i = 0; i < f->meta_count; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

void safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* ---- reading ---- */

int safetensors_read_index_f32(const zy_safetensors *f, int idx, float *out) {
    ZY_CHECK(idx >= 0 && idx < f->count);
    const zy_st_tensor *t = &f->tensors[idx];
    const uint8_t *src = f->data + t->begin;
    size_t n = t->numel;
    switch (t->dtype) {
    case ZY_ST_F32:
        memcpy(out, src, n * 4);
        break;
    case ZY_ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = zy_bf16_to_f32(h);
        }
        break;
    case ZY_ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            out[i] = zy_f16_to_f32(h);
        }
        break;
    case ZY_ST_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            out[i] = (float)d;
        }
        break;
    default:
        return zy_fail("%s: tensor '%s' has dtype %s, expected a float dtype (F32, BF16, F16, F64)",
                       f->path, t->name, st_dtypes[t->dtype].name);
    }
    return ZY_OK;
}

/* Finds a tensor and checks it has exactly the expected shape. */
static int st_lookup(const zy_safetensors *f, const char *name, int ndim, const int64_t *shape) {
    int idx = safetensors_find(f, name);
    char want[160], got[160];
    safetensors_shape_str(ndim, shape, want, sizeof want);
    if (idx < 0) return zy_fail("%s: no tensor '%s' (expected shape %s)", f->path, name, want);
    const zy_st_tensor *t = &f->tensors[idx];
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        safetensors_shape_str(t->ndim, t->shape, got, sizeof got);
        zy_fail("%s: tensor '%s' has shape %s, expected %s", f->path, name, got, want);
        return -1;
    }
    return idx;
}

int safetensors_read_f32(const zy_safetensors *f, const char *name, int ndim, const int64_t *shape,
                         float *out) {
    int idx = st_lookup(f, name, ndim, shape);
    if (idx < 0) return ZY_ERR;
    return safetensors_read_index_f32(f, idx, out);
}

int safetensors_read_i32(const zy_safetensors *f, const char *name, int ndim, const int64_t *shape,
                         int32_t *out) {
    int idx = st_lookup(f, name, ndim, shape);
    if (idx < 0) return ZY_ERR;
    const zy_st_tensor *t = &f->tensors[idx];
    const uint8_t *src = f->data + t->begin;
    if (t->dtype == ZY_ST_I32) {
        memcpy(out, src, t->numel * 4);
        return ZY_OK;
    }
    if (t->dtype != ZY_ST_I64)
        return zy_fail("%s: tensor '%s' has dtype %s, expected I32 or I64", f->path, name,
                       st_dtypes[t->dtype].name);
    for (size_t i = 0; i < t->numel; i++) {
        int64_t v;
        memcpy(&v, src + 8 * i, 8);
        if (v < INT32_MIN || v > INT32_MAX)
            return zy_fail("%s: tensor '%s' element %zu is %lld, outside the int32 range", f->path,
                           name, i, (long long)v);
        out[i] = (int32_t)v;
    }
    return ZY_OK;
}

/* ---- writing ---- */

/* Streams one tensor's bytes, converting fp32 sources in chunks (no full-size copy). */
static int st_write_tensor(zy_atomic_file *f, const zy_st_write_item *it, size_t numel) {
    if (it->dtype == ZY_ST_F32 || it->dtype == ZY_ST_I32 || it->dtype == ZY_ST_I64)
        return zy_atomic_write(f, it->data, numel * st_dtypes[it->dtype].size);
    enum { CHUNK = 1 << 16 };
    uint16_t *buf = zy_malloc(CHUNK * sizeof *buf);
    const float *src = it->data;
    int rc = ZY_OK;
    for (size_t i = 0; i < numel && rc == ZY_OK; i += CHUNK) {
        size_t m = numel - i < CHUNK ? numel - i : CHUNK;
        for (size_t j = 0; j < m; j++)
            buf[j] =
                it->dtype == ZY_ST_BF16 ? zy_f32_to_bf16(src[i + j]) : zy_f32_to_f16(src[i + j]);
        rc = zy_atomic_write(f, buf, m * 2);
    }
    free(buf);
    return rc;
}

static char *st_uint_text(uint64_t v) {
    char *s = zy_malloc(24);
    snprintf(s, 24, "%llu", (unsigned long long)v);
    return s;
}

/* Builds the JSON header (padded with spaces to a multiple of 8 so the data region is aligned). */
static int st_build_header(const char *path, const zy_st_write_item *items, int n_items,
                           const char *const *meta, int n_meta, size_t *numels, char **out,
                           size_t *out_len) {
    cJSON *root = cJSON_CreateObject();
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    }
    uint64_t off = 0;
    for (int i = 0; i < n_items; i++) {
        const zy_st_write_item *it = &items[i];
        if (strcmp(it->name, "__metadata__") == 0 ||
            cJSON_GetObjectItemCaseSensitive(root, it->name) != NULL) {
            cJSON_Delete(root);
            return zy_fail("%s: tensor name '%s' is used twice or reserved", path, it->name);
        }
        if (it->dtype != ZY_ST_F32 && it->dtype != ZY_ST_BF16 && it->dtype != ZY_ST_F16 &&
            it->dtype != ZY_ST_I32 && it->dtype != ZY_ST_I64) {
            cJSON_Delete(root);
            return zy_fail("%s: tensor '%s': cannot write dtype %s", path, it->name,
                           safetensors_dtype_name(it->dtype));
        }
        ZY_CHECK(it->ndim >= 0 && it->ndim <= ZY_ST_MAX_DIMS);
        cJSON *e = cJSON_AddObjectToObject(root, it->name);
        cJSON_AddStringToObject(e, "dtype", st_dtypes[it->dtype].name);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        size_t numel = 1;
        for (int d = 0; d < it->ndim; d++) {
            ZY_CHECK(it->shape[d] >= 0);
            numel *= (size_t)it->shape[d];
            char *s = st_uint_text((uint64_t)it->shape[d]);
            cJSON_AddItemToArray(sh, cJSON_CreateRaw(s));
            free(s);
        }
        numels[i] = numel;
        uint64_t end = off + (uint64_t)numel * st_dtypes[it->dtype].size;
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        char *s0 = st_uint_text(off), *s1 = st_uint_text(end);
        cJSON_AddItemToArray(o, cJSON_CreateRaw(s0));
        cJSON_AddItemToArray(o, cJSON_CreateRaw(s1));
        free(s0);
        free(s1);
        off = end;
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    ZY_CHECK(text != NULL);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    char *h = zy_malloc(padded + 1);
    memcpy(h, text, len);
    memset(h + len, ' ', padded - len);
    h[padded] = 0;
    cJSON_free(text);
    *out = h;
    *out_len = padded;
    return ZY_OK;
}

int safetensors_write(const char *path, const zy_st_write_item *items, int n_items,
                      const char *const *meta, int n_meta) {
    size_t *numels = zy_calloc((size_t)n_items + 1, sizeof *numels);
    char *header = NULL;
    size_t hlen = 0;
    if (st_build_header(path, items, n_items, meta, n_meta, numels, &header, &hlen) != ZY_OK) {
        free(numels);
        return ZY_ERR;
    }
    zy_atomic_file f;
    int rc = zy_atomic_open(&f, path);
    if (rc == ZY_OK) {
        uint64_t n = hlen;
        rc = zy_atomic_write(&f, &n, 8);
        if (rc == ZY_OK) rc = zy_atomic_write(&f, header, hlen);
        for (int i = 0; i < n_items && rc == ZY_OK; i++)
            rc = st_write_tensor(&f, &items[i], numels[i]);
        if (rc == ZY_OK) rc = zy_atomic_commit(&f);
    }
    free(header);
    free(numels);
    return rc;
}
