/* Token shards: one file of token ids with a 64-byte header, documents separated by eos.
 *
 * Layout (little-endian):
 *   0  char[8] magic "ZYTOKSHD"
 *   8  u32     version (1)
 *   12 u32     bytes per token: 2 (uint16, when vocab_size <= 65536) or 4 (uint32)
 *   16 u64     token count
 *   24 u64     document count
 *   32 u32     vocab size
 *   36 u32     eos id
 *   40 u8[16]  reserved, zero
 *   56 u64     checksum: zy_hash_bytes of the payload, seeded with zy_hash_bytes of bytes 0..55
 *   64 ...     payload: token count * bytes per token
 * Opening checks every field, the file size and (when asked) the checksum; a truncated, foreign or
 * corrupt file is one error naming it. */
#ifndef ZY_SHARD_H
#define ZY_SHARD_H

#include "base/fileio.h"

#include <stddef.h>
#include <stdint.h>

#define ZY_SHARD_MAGIC        "ZYTOKSHD"
#define ZY_SHARD_VERSION      1
#define ZY_SHARD_HEADER_BYTES 64

typedef struct {
    uint32_t version;
    uint32_t token_bytes; /* 2 or 4 */
    uint64_t ntokens;
    uint64_t ndocs;
    uint32_t vocab_size;
    uint32_t eos_id;
    uint64_t checksum;
} zy_shard_header;

/* Bytes per token for a vocabulary size: 2 when every id fits uint16, else 4. */
uint32_t shard_token_bytes(uint32_t vocab_size);

/* Writes tokens [n] as a shard file (temporary file, fsync, rename). A token outside
 * [0, vocab_size) is an error. */
int shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size,
                uint32_t eos_id, uint64_t ndocs);

typedef struct {
    zy_mmap map;
    zy_shard_header h;
    const uint8_t *payload; /* [ntokens * token_bytes] */
    char *path;
} zy_shard;

/* Maps a shard and checks its header and size; verify != 0 also checks the checksum. */
int shard_open(zy_shard *s, const char *path, int verify);
void shard_close(zy_shard *s);
/* Copies tokens [start, start + n) as int32 into out [n]. */
void shard_read(const zy_shard *s, uint64_t start, uint64_t n, int32_t *out);

#endif
