/* Hash maps for the tokenizer and its trainer: byte strings -> int64 (vocabularies, word caches,
 * word counts) and uint64 -> uint64 (BPE pair tables), both open addressing with linear probing.
 * Also the byte hash used for shard checksums and document hashing (stable on little-endian). */
#ifndef ZY_HASHMAP_H
#define ZY_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

/* A 64-bit hash of n bytes under a seed; fast on long inputs (4 lanes of 8-byte words). */
uint64_t zy_hash_bytes(const void *data, size_t n, uint64_t seed);

typedef struct {
    uint64_t hash;   /* 0 marks an empty slot */
    uint64_t keyoff; /* offset of the key in the arena */
    uint32_t keylen;
    int64_t value;
} zy_strmap_slot;

typedef struct {
    zy_strmap_slot *slots; /* [cap] */
    size_t cap, count;
    char *arena; /* keys, back to back */
    size_t arena_len, arena_cap;
} zy_strmap;

void strmap_init(zy_strmap *m);
void strmap_free(zy_strmap *m);
/* Removes every key (keeps the allocations). */
void strmap_clear(zy_strmap *m);
/* Looks a key up: 1 and *value when present, else 0. */
int strmap_get(const zy_strmap *m, const void *key, size_t len, int64_t *value);
/* The value slot of a key, inserting it with value `init` when absent (*inserted says which). */
int64_t *strmap_put(zy_strmap *m, const void *key, size_t len, int64_t init, int *inserted);
/* The key stored in a slot (pointer into the arena; valid until the next insert). */
const char *strmap_key(const zy_strmap *m, const zy_strmap_slot *s);

typedef struct {
    uint64_t *keys; /* [cap]; UINT64_MAX marks an empty slot (never a valid key) */
    uint64_t *vals; /* [cap] */
    size_t cap, count;
} zy_u64map;

void u64map_init(zy_u64map *m);
void u64map_free(zy_u64map *m);
/* Looks a key up: 1 and *value when present, else 0. */
int u64map_get(const zy_u64map *m, uint64_t key, uint64_t *value);
/* Sets key -> value (overwrites). key must not be UINT64_MAX. */
void u64map_set(zy_u64map *m, uint64_t key, uint64_t value);
/* The value slot of a key, inserting `init` when absent. */
uint64_t *u64map_slot(zy_u64map *m, uint64_t key, uint64_t init);

#endif
