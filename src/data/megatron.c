/* Megatron indexed datasets as token shards (see megatron.h). */
#include "data/megatron.h"
#include "base/err.h"
#include "base/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDX_MAGIC        "MMIDIDX\0\0"
#define IDX_MAGIC_BYTES  9
#define IDX_HEADER_BYTES (9 + 8 + 1 + 8 + 8)

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n > t && strcmp(s + n - t, tail) == 0;
}

int megatron_is_idx_path(const char *path) {
    return ends_with(path, ".idx");
}

int megatron_idx_beside(const char *path) {
    if (!ends_with(path, ".bin")) return 0;
    size_t n = strlen(path);
    char *idx = zy_strdup(path);
    memcpy(idx + n - 4, ".idx", 4);
    int there = zy_path_exists(idx);
    free(idx);
    return there;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int32_t le32s(const uint8_t *p) {
    return (int32_t)(p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Megatron's element type code -> our dtype and its size; 0 when unusable (*why says so). */
static int element_type(uint8_t code, zy_shard_dtype *dt, uint32_t *bytes, const char **why) {
    static const struct {
        uint8_t code;
        zy_shard_dtype dt;
        uint32_t bytes;
    } types[] = {{1, SHARD_U8, 1},  {2, SHARD_I8, 1},  {3, SHARD_I16, 2},
                 {4, SHARD_I32, 4}, {5, SHARD_I64, 8}, {8, SHARD_U16, 2}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (types[i].code == code) {
            *dt = types[i].dt;
            *bytes = types[i].bytes;
            return 1;
        }
    *why = code == 6 || code == 7 ? "floating point, not token ids" : "not a Megatron type";
    return 0;
}

/* Checks the index against itself and the .bin size; fills the header fields. */
static int check_index(const char *idx, const zy_mmap *m, uint64_t bin_size, zy_shard *s) {
    const uint8_t *b = m->data;
    if (m->size < IDX_HEADER_BYTES)
        return zy_fail("%s: %zu bytes, shorter than a Megatron index header (%d bytes): truncated",
                       idx, m->size, IDX_HEADER_BYTES);
    if (memcmp(b, IDX_MAGIC, IDX_MAGIC_BYTES) != 0)
        return zy_fail("%s: not a Megatron index (magic is not MMIDIDX)", idx);
    uint64_t version = le64(b + 9);
    if (version != 1)
        return zy_fail("%s: Megatron index version %" PRIu64 ", zayac reads version 1", idx,
                       version);
    const char *why = NULL;
    uint32_t item;
    if (!element_type(b[17], &s->dtype, &item, &why))
        return zy_fail("%s: element type code %u is %s (expected 1 uint8, 2 int8, 3 int16, 4 "
                       "int32, 5 int64 or 8 uint16)",
                       idx, b[17], why);
    uint64_t S = le64(b + 18), D = le64(b + 26), body = m->size - IDX_HEADER_BYTES;
    /* 12 bytes per sequence and 8 per document entry must fill the rest exactly */
    if (S > body / 12 || D > (body - 12 * S) / 8 || 12 * S + 8 * D != body)
        return zy_fail("%s: the header counts %" PRIu64 " sequences and %" PRIu64 " document "
                       "entries, which do not fill the %" PRIu64 " bytes after the header (12 per "
                       "sequence, 8 per entry): truncated or corrupt",
                       idx, S, D, body);
    if (S == 0) return zy_fail("%s: the index holds no sequences", idx);
    if (D < 2)
        return zy_fail("%s: the document index has %" PRIu64 " entries, expected at least 2 (0, "
                       "then the end of each document)",
                       idx, D);
    const uint8_t *sizes = b + IDX_HEADER_BYTES, *ptrs = sizes + 4 * S, *docs = ptrs + 8 * S;
    uint64_t at = 0; /* bytes of .bin covered so far */
    for (uint64_t i = 0; i < S; i++) {
        int32_t n = le32s(sizes + 4 * i);
        uint64_t p = le64(ptrs + 8 * i);
        if (n < 0) return zy_fail("%s: sequence %" PRIu64 " has size %d, expected >= 0", idx, i, n);
        if (p != at)
            return zy_fail("%s: sequence %" PRIu64 " starts at byte %" PRIu64 " of the .bin, "
                           "expected %" PRIu64 " (sequences must follow each other from byte 0)",
                           idx, i, p, at);
        if ((uint64_t)n * item > bin_size - at)
            return zy_fail("%s: sequence %" PRIu64 " (%d elements at byte %" PRIu64 ") runs past "
                           "the end of the .bin (%" PRIu64 " bytes): truncated or mismatched",
                           idx, i, n, p, bin_size);
        at += (uint64_t)n * item;
    }
    if (at != bin_size)
        return zy_fail("%s: the sequences cover %" PRIu64 " bytes but the .bin holds %" PRIu64
                       ": the pair does not match",
                       idx, at, bin_size);
    for (uint64_t d = 0; d < D; d++) {
        uint64_t v = le64(docs + 8 * d), prev = d ? le64(docs + 8 * (d - 1)) : 0;
        if ((d == 0 && v != 0) || v < prev || v > S || (d == D - 1 && v != S))
            return zy_fail("%s: document index entry %" PRIu64 " is %" PRId64 ": expected "
                           "entries rising from 0 to the sequence count %" PRIu64,
                           idx, d, (int64_t)v, S);
    }
    s->h.version = 1;
    s->h.token_bytes = item;
    s->h.ntokens = bin_size / item;
    s->h.ndocs = D - 1;
    return ZY_OK;
}

/* Every stored value must be a token id in [0, 2^31) (the signed and wide types can hold
 * others). */
static int check_values(const zy_shard *s, const char *bin) {
    if (s->dtype == SHARD_U8 || s->dtype == SHARD_U16) return ZY_OK;
    const uint8_t *p = s->payload;
    for (uint64_t i = 0; i < s->h.ntokens; i++) {
        int64_t v = s->dtype == SHARD_I8    ? (int8_t)p[i]
                    : s->dtype == SHARD_I16 ? (int16_t)(uint16_t)(p[2 * i] | p[2 * i + 1] << 8)
                    : s->dtype == SHARD_I32 ? le32s(p + 4 * i)
                                            : (int64_t)le64(p + 8 * i);
        if (v < 0 || v > INT32_MAX)
            return zy_fail("%s: token %" PRIu64 " is %" PRId64 ", not a token id (0 to 2^31-1)",
                           bin, i, v);
    }
    return ZY_OK;
}

int megatron_open(zy_shard *s, const char *idx_path) {
    memset(s, 0, sizeof *s);
    size_t n = strlen(idx_path);
    char *bin = zy_strdup(idx_path);
    memcpy(bin + n - 4, ".bin", 4);
    zy_mmap idx = {0};
    int rc = zy_mmap_open(&idx, idx_path);
    if (rc == ZY_OK) rc = zy_mmap_open(&s->map, bin);
    if (rc == ZY_OK) rc = check_index(idx_path, &idx, s->map.size, s);
    zy_mmap_close(&idx);
    s->payload = s->map.data;
    if (rc == ZY_OK) rc = check_values(s, bin);
    free(bin);
    if (rc != ZY_OK) {
        zy_mmap_close(&s->map);
        memset(s, 0, sizeof *s);
        return ZY_ERR;
    }
    s->path = zy_strdup(idx_path);
    return ZY_OK;
}
