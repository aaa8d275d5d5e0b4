/* Hash maps and the byte hash (see hashmap.h). */
#include "data/hashmap.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define K1 0x9E3779B185EBCA87ULL
#define K2 0xC2B2AE3D27D4EB4FULL
#define K3 0x165667B19E3779F9ULL

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* One accumulation round: spreads a word into a lane. */
static inline uint64_t round64(uint64_t acc, uint64_t w) {
    acc += w * K2;
    return rotl64(acc, 31) * K1;
}

static inline uint64_t fmix64(uint64_t z) {
    z = (z ^ (z >> 33)) * K2;
    z = (z ^ (z >> 29)) * K3;
    return z ^ (z >> 32);
}

uint64_t zy_hash_bytes(const void *data, size_t n, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t h = seed + K3 + (uint64_t)n * K1;
    size_t i = 0;
    if (n >= 32) { /* four independent lanes keep the multipliers busy on long inputs */
        uint64_t a = seed + K1 + K2, b = seed + K2, c = seed, d = seed - K1;
        for (; i + 32 <= n; i += 32) {
            a = round64(a, load64(p + i));
            b = round64(b, load64(p + i + 8));
            c = round64(c, load64(p + i + 16));
            d = round64(d, load64(p + i + 24));
        }
        h ^= rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18);
        h = h * K1 + K3;
    }
    for (; i + 8 <= n; i += 8) h = rotl64(h ^ round64(0, load64(p + i)), 27) * K1 + K3;
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = rotl64(h ^ round64(0, w ^ ((uint64_t)(n - i) << 56)), 27) * K1 + K3;
    }
    return fmix64(h);
}

/* ---- byte strings -> int64 ---- */

void strmap_init(zy_strmap *m) {
    memset(m, 0, sizeof *m);
}

void strmap_free(zy_strmap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void strmap_clear(zy_strmap *m) {
    if (m->slots) memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->arena_len = 0;
}

static uint64_t key_hash(const void *key, size_t len) {
    uint64_t h = zy_hash_bytes(key, len, 0x5851F42D4C957F2DULL);
    return h ? h : 1; /* 0 marks empty slots */
}

const char *strmap_key(const zy_strmap *m, const zy_strmap_slot *s) {
    return m->arena + s->keyoff;
}

static zy_strmap_slot *find_slot(const zy_strmap *m, uint64_t h, const void *key, size_t len) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        zy_strmap_slot *s = &m->slots[i];
        if (s->hash == 0) return s;
        if (s->hash == h && s->keylen == len && memcmp(m->arena + s->keyoff, key, len) == 0)
            return s;
    }
}

static void strmap_grow(zy_strmap *m) {
    size_t old_cap = m->cap;
    zy_strmap_slot *old = m->slots;
    m->cap = old_cap ? old_cap * 2 : 1024;
    m->slots = zy_calloc(m->cap, sizeof *m->slots);
    size_t mask = m->cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].hash) continue;
        size_t j = old[i].hash & mask;
        while (m->slots[j].hash) j = (j + 1) & mask;
        m->slots[j] = old[i];
    }
    free(old);
}

int strmap_get(const zy_strmap *m, const void *key, size_t len, int64_t *value) {
    if (!m->count) return 0;
    zy_strmap_slot *s = find_slot(m, key_hash(key, len), key, len);
    if (!s->hash) return 0;
    if (value) *value = s->value;
    return 1;
}

int64_t *strmap_put(zy_strmap *m, const void *key, size_t len, int64_t init, int *inserted) {
    if ((m->count + 1) * 4 > m->cap * 3) strmap_grow(m); /* load factor <= 3/4 */
    uint64_t h = key_hash(key, len);
    zy_strmap_slot *s = find_slot(m, h, key, len);
    if (s->hash) {
        if (inserted) *inserted = 0;
        return &s->value;
    }
    if (m->arena_len + len + 1 > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (m->arena_len + len + 1 > cap) cap *= 2;
        m->arena = zy_realloc(m->arena, cap);
        m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, key, len);
    m->arena[m->arena_len + len] = 0;
    s->hash = h;
    s->keyoff = m->arena_len;
    s->keylen = (uint32_t)len;
    s->value = init;
    m->arena_len += len + 1;
    m->count++;
    if (inserted) *inserted = 1;
    return &s->value;
}

/* ---- uint64 -> uint64 ---- */

static inline size_t u64_pos(uint64_t key, size_t mask) {
    return (size_t)(fmix64(key) & mask);
}

void u64map_init(zy_u64map *m) {
    memset(m, 0, sizeof *m);
}

void u64map_free(zy_u64map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static void u64map_grow(zy_u64map *m) {
    size_t old_cap = m->cap;
    uint64_t *ok = m->keys, *ov = m->vals;
    m->cap = old_cap ? old_cap * 2 : 1024;
    m->keys = zy_malloc(m->cap * sizeof *m->keys);
    m->vals = zy_malloc(m->cap * sizeof *m->vals);
    memset(m->keys, 0xff, m->cap * sizeof *m->keys);
    size_t mask = m->cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (ok[i] == UINT64_MAX) continue;
        size_t j = u64_pos(ok[i], mask);
        while (m->keys[j] != UINT64_MAX) j = (j + 1) & mask;
        m->keys[j] = ok[i];
        m->vals[j] = ov[i];
    }
    free(ok);
    free(ov);
}

int u64map_get(const zy_u64map *m, uint64_t key, uint64_t *value) {
    if (!m->count) return 0;
    size_t mask = m->cap - 1;
    for (size_t i = u64_pos(key, mask);; i = (i + 1) & mask) {
        if (m->keys[i] == key) {
            *value = m->vals[i];
            return 1;
        }
        if (m->keys[i] == UINT64_MAX) return 0;
    }
}

uint64_t *u64map_slot(zy_u64map *m, uint64_t key, uint64_t init) {
    ZY_CHECK(key != UINT64_MAX);
    if ((m->count + 1) * 4 > m->cap * 3) u64map_grow(m);
    size_t mask = m->cap - 1;
    size_t i = u64_pos(key, mask);
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key) i = (i + 1) & mask;
    if (m->keys[i] == UINT64_MAX) {
        m->keys[i] = key;
        m->vals[i] = init;
        m->count++;
    }
    return &m->vals[i];
}

void u64map_set(zy_u64map *m, uint64_t key, uint64_t value) {
    *u64map_slot(m, key, value) = value;
}
