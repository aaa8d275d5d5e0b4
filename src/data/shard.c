/* Token shard files (see shard.h). */
#include "data/shard.h"
#include "base/err.h"
#include "data/hashmap.h"
#include "data/megatron.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

uint32_t shard_token_bytes(uint32_t vocab_size) {
    return vocab_size <= 65536 ? 2 : 4;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t shard_checksum(const uint8_t *header, const uint8_t *payload, size_t nbytes) {
    return zy_hash_bytes(payload, nbytes, zy_hash_bytes(header, 56, 0x7A7973686172640AULL));
}

int shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size,
                uint32_t eos_id, uint64_t ndocs, uint64_t tokenizer_hash) {
    uint32_t tb = shard_token_bytes(vocab_size);
    size_t nbytes = (size_t)n * tb;
    uint8_t *buf = zy_malloc(ZY_SHARD_HEADER_BYTES + nbytes);
    uint8_t *pay = buf + ZY_SHARD_HEADER_BYTES;
    for (uint64_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || (uint32_t)t >= vocab_size) {
            free(buf);
            return zy_fail("%s: token %" PRIu64 " is %d, outside the vocabulary [0, %u)", path, i,
                           t, vocab_size);
        }
        if (tb == 2) {
            pay[2 * i] = (uint8_t)t;
            pay[2 * i + 1] = (uint8_t)(t >> 8);
        } else {
            put_u32(pay + 4 * i, (uint32_t)t);
        }
    }
    memset(buf, 0, ZY_SHARD_HEADER_BYTES);
    memcpy(buf, ZY_SHARD_MAGIC, 8);
    put_u32(buf + 8, ZY_SHARD_VERSION);
    put_u32(buf + 12, tb);
    put_u64(buf + 16, n);
    put_u64(buf + 24, ndocs);
    put_u32(buf + 32, vocab_size);
    put_u32(buf + 36, eos_id);
    put_u64(buf + 40, tokenizer_hash);
    put_u64(buf + 56, shard_checksum(buf, pay, nbytes));
    int rc = zy_write_file_atomic(path, buf, ZY_SHARD_HEADER_BYTES + nbytes);
    free(buf);
    return rc;
}

static int open_checked(zy_shard *s, const char *path, int verify) {
    ZY_TRY(zy_mmap_open(&s->map, path));
    const uint8_t *b = s->map.data;
    size_t size = s->map.size;
    if (size < ZY_SHARD_HEADER_BYTES)
        return zy_fail("%s: %zu bytes, shorter than a shard header (%d bytes): truncated or not a "
                       "token shard",
                       path, size, ZY_SHARD_HEADER_BYTES);
    if (memcmp(b, ZY_SHARD_MAGIC, 8) != 0) {
        if (memcmp(b, "MMIDIDX", 7) == 0 || megatron_idx_beside(path))
            return zy_fail("%s: not a zayac token shard (bad magic); it looks like a Megatron "
                           "indexed dataset: name its .idx file",
                           path);
        return zy_fail("%s: not a zayac token shard (bad magic)", path);
    }
    zy_shard_header *h = &s->h;
    h->version = get_u32(b + 8);
    h->token_bytes = get_u32(b + 12);
    h->ntokens = get_u64(b + 16);
    h->ndocs = get_u64(b + 24);
    h->vocab_size = get_u32(b + 32);
    h->eos_id = get_u32(b + 36);
    h->tokenizer_hash = get_u64(b + 40);
    h->checksum = get_u64(b + 56);
    if (h->version != ZY_SHARD_VERSION)
        return zy_fail("%s: shard version %u, this build reads version %d", path, h->version,
                       ZY_SHARD_VERSION);
    if (h->token_bytes != 2 && h->token_bytes != 4)
        return zy_fail("%s: %u bytes per token in the header, expected 2 or 4", path,
                       h->token_bytes);
    if (h->vocab_size == 0 || h->token_bytes != shard_token_bytes(h->vocab_size) ||
        h->eos_id >= h->vocab_size)
        return zy_fail("%s: header is inconsistent (vocab %u, %u bytes per token, eos %u)", path,
                       h->vocab_size, h->token_bytes, h->eos_id);
    uint64_t want = h->ntokens * h->token_bytes;
    if (h->ntokens > (UINT64_MAX - ZY_SHARD_HEADER_BYTES) / 4 ||
        size - ZY_SHARD_HEADER_BYTES != want)
        return zy_fail("%s: header says %" PRIu64 " tokens (%" PRIu64 " payload bytes) but the "
                       "file holds %zu payload bytes: truncated or corrupt",
                       path, h->ntokens, want, size - ZY_SHARD_HEADER_BYTES);
    s->payload = b + ZY_SHARD_HEADER_BYTES;
    s->dtype = h->token_bytes == 2 ? SHARD_U16 : SHARD_U32;
    if (verify) {
        uint64_t got = shard_checksum(b, s->payload, (size_t)want);
        if (got != h->checksum)
            return zy_fail("%s: checksum mismatch (header %016" PRIx64 ", data %016" PRIx64
                           "): the file is corrupt",
                           path, h->checksum, got);
    }
    return ZY_OK;
}

int shard_open(zy_shard *s, const char *path, int verify) {
    memset(s, 0, sizeof *s);
    if (megatron_is_idx_path(path)) return megatron_open(s, path);
    if (open_checked(s, path, verify) != ZY_OK) {
        zy_mmap_close(&s->map);
        memset(s, 0, sizeof *s);
        return ZY_ERR;
    }
    s->path = zy_strdup(path);
    return ZY_OK;
}

void shard_close(zy_shard *s) {
    zy_mmap_close(&s->map);
    free(s->path);
    memset(s, 0, sizeof *s);
}

static int64_t get_i64(const uint8_t *p) {
    return (int64_t)get_u64(p);
}

void shard_read(const zy_shard *s, uint64_t start, uint64_t n, int32_t *out) {
    ZY_CHECK(start + n <= s->h.ntokens);
    const uint8_t *p = s->payload + s->h.token_bytes * start;
    switch (s->dtype) {
    case SHARD_U16:
        for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)(p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
        break;
    case SHARD_U32:
    case SHARD_I32:
        for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)get_u32(p + 4 * i);
        break;
    case SHARD_U8:
        for (uint64_t i = 0; i < n; i++) out[i] = p[i];
        break;
    case SHARD_I8:
        for (uint64_t i = 0; i < n; i++) out[i] = (int8_t)p[i];
        break;
    case SHARD_I16:
        for (uint64_t i = 0; i < n; i++)
            out[i] = (int16_t)(uint16_t)(p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
        break;
    case SHARD_I64:
        for (uint64_t i = 0; i < n; i++) out[i] = (int32_t)get_i64(p + 8 * i);
        break;
    }
}
