/* .npy reading and writing (see npy.h). The header is a Python dict literal, e.g.
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, padded with spaces and a newline. */
#include "io/npy.h"
#include "base/err.h"
#include "base/fileio.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

void npy_free(zy_npy *a) {
    free(a->data);
    memset(a, 0, sizeof *a);
}

void npy_shape_str(const zy_npy *a, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < a->ndim && used < n; i++)
        used +=
            (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)a->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* ---- header dict parsing ---- */

typedef struct {
    const char *p, *end, *path;
} npy_lex;

static void lex_space(npy_lex *l) {
    while (l->p < l->end && isspace((unsigned char)*l->p)) l->p++;
}

static int lex_char(npy_lex *l, char c) {
    lex_space(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('...' or "...", no escapes in numpy headers) into buf. */
static int lex_string(npy_lex *l, char *buf, size_t n) {
    lex_space(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) return 0;
    char q = *l->p++;
    size_t k = 0;
    while (l->p < l->end && *l->p != q) {
        if (k + 1 >= n) return 0;
        buf[k++] = *l->p++;
    }
    if (l->p >= l->end) return 0;
    l->p++;
    buf[k] = 0;
    return 1;
}

static int lex_word(npy_lex *l, const char *w) {
    lex_space(l);
    size_t n = strlen(w);
    if ((size_t)(l->end - l->p) >= n && memcmp(l->p, w, n) == 0) {
        l->p += n;
        return 1;
    }
    return 0;
}

/* A tuple of non-negative integers: (), (3,), (2, 3). */
static int lex_shape(npy_lex *l, zy_npy *a) {
    if (!lex_char(l, '(')) return zy_fail("%s: header shape is not a tuple", l->path);
    a->ndim = 0;
    for (;;) {
        if (lex_char(l, ')')) return ZY_OK;
        lex_space(l);
        if (l->p >= l->end || !isdigit((unsigned char)*l->p))
            return zy_fail("%s: header shape is not a tuple of non-negative integers", l->path);
        if (a->ndim == ZY_NPY_MAX_DIMS)
            return zy_fail("%s: more than %d dimensions", l->path, ZY_NPY_MAX_DIMS);
        int64_t v = 0;
        while (l->p < l->end && isdigit((unsigned char)*l->p)) {
            if (v > (INT64_MAX - 9) / 10) return zy_fail("%s: shape entry too large", l->path);
            v = v * 10 + (*l->p++ - '0');
        }
        if (l->p < l->end && *l->p == 'L') l->p++; /* Python 2 long suffix */
        a->shape[a->ndim++] = v;
        if (lex_char(l, ',')) continue;
        if (lex_char(l, ')')) return ZY_OK;
        return zy_fail("%s: header shape is not a tuple of non-negative integers", l->path);
    }
}

/* Parses the dict; *itemsize gets the on-disk element size and *is_i8 whether it is '<i8'. */
static int npy_parse_dict(npy_lex *l, zy_npy *a, size_t *itemsize, int *is_i8) {
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!lex_char(l, '{')) return zy_fail("%s: header is not a dict", l->path);
    for (;;) {
        if (lex_char(l, '}')) break;
        char key[32], val[32];
        if (!lex_string(l, key, sizeof key) || !lex_char(l, ':'))
            return zy_fail("%s: header dict is malformed", l->path);
        if (strcmp(key, "descr") == 0) {
            if (!lex_string(l, val, sizeof val))
                return zy_fail("%s: header descr is not a simple dtype string", l->path);
            *is_i8 = 0;
            if (strcmp(val, "<f4") == 0)
                a->dtype = ZY_NPY_F32, *itemsize = 4;
            else if (strcmp(val, "<i4") == 0)
                a->dtype = ZY_NPY_I32, *itemsize = 4;
            else if (strcmp(val, "<i8") == 0)
                a->dtype = ZY_NPY_I32, *itemsize = 8, *is_i8 = 1;
            else
                return zy_fail("%s: dtype '%s' is not supported (expected '<f4', '<i4' or '<i8')",
                               l->path, val);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (lex_word(l, "True"))
                return zy_fail("%s: fortran_order is True; only C order is supported", l->path);
            if (!lex_word(l, "False"))
                return zy_fail("%s: header fortran_order is not True or False", l->path);
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            ZY_TRY(lex_shape(l, a));
            have_shape = 1;
        } else {
            return zy_fail("%s: unexpected header key '%s'", l->path, key);
        }
        if (!lex_char(l, ',')) {
            if (lex_char(l, '}')) break;
            return zy_fail("%s: header dict is malformed", l->path);
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return zy_fail("%s: header lacks %s", l->path,
                       !have_descr   ? "descr"
                       : !have_order ? "fortran_order"
                                     : "shape");
    return ZY_OK;
}

int npy_read(zy_npy *a, const char *path) {
    memset(a, 0, sizeof *a);
    zy_mmap map;
    ZY_TRY(zy_mmap_open(&map, path));
    const char *buf = map.data ? map.data : "";
    size_t len = map.size;
    const unsigned char *u = (const unsigned char *)buf;
    int rc = ZY_OK;
    size_t hstart = 0, hlen = 0;
    if (len < 10 || memcmp(buf, npy_magic, 6) != 0) {
        rc = zy_fail("%s: not a .npy file (no \\x93NUMPY magic)", path);
    } else if (u[6] == 1) {
        hlen = (size_t)u[8] | (size_t)u[9] << 8;
        hstart = 10;
    } else if (u[6] == 2 || u[6] == 3) {
        if (len < 12)
            rc = zy_fail("%s: truncated header", path);
        else
            hlen = (size_t)u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 | (size_t)u[11] << 24;
        hstart = 12;
    } else {
        rc = zy_fail("%s: .npy version %d.%d is not supported (1.0, 2.0, 3.0)", path, u[6], u[7]);
    }
    if (rc == ZY_OK && hlen > len - hstart)
        rc = zy_fail("%s: header length %zu runs past the end of the file (%zu bytes)", path, hlen,
                     len);
    size_t itemsize = 4;
    int is_i8 = 0;
    if (rc == ZY_OK) {
        npy_lex l = {buf + hstart, buf + hstart + hlen, path};
        rc = npy_parse_dict(&l, a, &itemsize, &is_i8);
    }
    size_t data_at = hstart + hlen;
    if (rc == ZY_OK) {
        a->numel = 1;
        for (int i = 0; i < a->ndim && rc == ZY_OK; i++) {
            size_t d = (size_t)a->shape[i];
            if (d != 0 && a->numel > SIZE_MAX / 8 / d)
                rc = zy_fail("%s: shape too large", path);
            else
                a->numel *= d;
        }
    }
    if (rc == ZY_OK && len - data_at != a->numel * itemsize) {
        char s[200];
        npy_shape_str(a, s, sizeof s);
        rc = zy_fail("%s: shape %s needs %zu data bytes but the file has %zu (%s)", path, s,
                     a->numel * itemsize, len - data_at,
                     len - data_at < a->numel * itemsize ? "truncated" : "trailing bytes");
    }
    if (rc == ZY_OK) {
        a->data = zy_malloc(a->numel * 4);
        const char *src = buf + data_at;
        if (!is_i8)
            memcpy(a->data, src, a->numel * 4);
        else {
            int32_t *dst = a->data;
            for (size_t i = 0; i < a->numel && rc == ZY_OK; i++) {
                int64_t v;
                memcpy(&v, src + 8 * i, 8);
                if (v < INT32_MIN || v > INT32_MAX)
                    rc = zy_fail("%s: element %zu is %lld, outside the int32 range", path, i,
                                 (long long)v);
                dst[i] = (int32_t)v;
            }
        }
    }
    zy_mmap_close(&map);
    if (rc != ZY_OK) npy_free(a);
    return rc;
}

int npy_read_as(zy_npy *a, const char *path, zy_npy_dtype want) {
    ZY_TRY(npy_read(a, path));
    if (a->dtype != want) {
        int got = a->dtype;
        npy_free(a);
        return zy_fail("%s: holds %s values, expected %s", path,
                       got == ZY_NPY_F32 ? "float32" : "integer",
                       want == ZY_NPY_F32 ? "float32 ('<f4')" : "int32 ('<i4' or '<i8')");
    }
    return ZY_OK;
}

/* Header then data, streamed to a temporary file and renamed into place (a large logits array is
 * not copied into one buffer first). */
static int npy_write_atomic(const char *path, const void *head, size_t hn, const void *data,
                            size_t dn) {
    zy_atomic_file f;
    ZY_TRY(zy_atomic_open(&f, path));
    ZY_TRY(zy_atomic_write(&f, head, hn));
    ZY_TRY(zy_atomic_write(&f, data, dn));
    return zy_atomic_commit(&f);
}

static int npy_write(const char *path, const char *descr, int ndim, const int64_t *shape,
                     const void *data) {
    ZY_CHECK(ndim >= 0 && ndim <= ZY_NPY_MAX_DIMS);
    char dict[512];
    size_t k = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        ZY_CHECK(shape[i] >= 0);
        numel *= (size_t)shape[i];
        k += (size_t)snprintf(dict + k, sizeof dict - k, i ? " %lld," : "%lld,",
                              (long long)shape[i]);
    }
    if (ndim > 1) k--; /* (2, 3) has no trailing comma; (3,) keeps it */
    k += (size_t)snprintf(dict + k, sizeof dict - k, "), }");
    size_t total = (10 + k + 1 + 63) & ~(size_t)63, hlen = total - 10;
    char *out = zy_malloc(total);
    memcpy(out, npy_magic, 6);
    out[6] = 1;
    out[7] = 0;
    out[8] = (char)(hlen & 0xff);
    out[9] = (char)(hlen >> 8);
    memcpy(out + 10, dict, k);
    memset(out + 10 + k, ' ', hlen - k - 1);
    out[total - 1] = '\n';
    int rc = npy_write_atomic(path, out, total, data, numel * 4);
    free(out);
    return rc;
}

int npy_write_f32(const char *path, int ndim, const int64_t *shape, const float *data) {
    return npy_write(path, "<f4", ndim, shape, data);
}

int npy_write_i32(const char *path, int ndim, const int64_t *shape, const int32_t *data) {
    return npy_write(path, "<i4", ndim, shape, data);
}
