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
 *   40 u64     tokenizer hash (tok_vocab_hash, data/tok_hash.h); 0 = not recorded (shards written
 *              before it was, still read)
 *   48 u8[8]   reserved, zero
 *   56 u64     checksum: zy_hash_bytes of the payload, seeded with zy_hash_bytes of bytes 0..55
 *   64 ...     payload: token count * bytes per token
 * Opening checks every field, the file size and (when asked) the checksum; a truncated, foreign or
 * corrupt file is one error naming it.
 *
 * A zy_shard may also hold a Megatron indexed dataset (data/megatron.h): the same token stream
 * read from PREFIX.bin, with its own element type and no vocabulary, eos or tokenizer recorded. */
#ifndef ZY_SHARD_H
#define ZY_SHARD_H

#include "base/fileio.h"

#include <stddef.h>
#include <stdint.h>

#define ZY_SHARD_MAGIC        "ZYTOKSHD"
#define ZY_SHARD_VERSION      1
#define ZY_SHARD_HEADER_BYTES 64

/* How the payload stores a token. */
typedef enum {
    SHARD_U16 = 0, /* zayac, vocabularies up to 65536 */
    SHARD_U32,     /* zayac, larger vocabularies */
    SHARD_U8,      /* the rest: Megatron element types (their values are checked on opening) */
    SHARD_I8,
    SHARD_I16,
    SHARD_I32,
    SHARD_I64,
} zy_shard_dtype;

typedef struct {
    uint32_t version;
    uint32_t token_bytes; /* 2 or 4 (Megatron: 1, 2, 4 or 8) */
    uint64_t ntokens;
    uint64_t ndocs;
    uint32_t vocab_size;     /* 0: not recorded (Megatron) */
    uint32_t eos_id;         /* meaningful only when vocab_size > 0 */
    uint64_t tokenizer_hash; /* 0: not recorded */
    uint64_t checksum;
} zy_shard_header;

/* Bytes per token for a vocabulary size: 2 when every id fits uint16, else 4. */
uint32_t shard_token_bytes(uint32_t vocab_size);

/* Writes tokens [n] as a shard file (temporary file, fsync, rename). A token outside
 * [0, vocab_size) is an error. tokenizer_hash: the tokenizer's (tok_vocab_hash), 0 if unknown. */
int shard_write(const char *path, const int32_t *tokens, uint64_t n, uint32_t vocab_size,
                uint32_t eos_id, uint64_t ndocs, uint64_t tokenizer_hash);

typedef struct {
    zy_mmap map;
    zy_shard_header h;
    zy_shard_dtype dtype;
    const uint8_t *payload; /* [ntokens * token_bytes] */
    char *path;
} zy_shard;

/* Maps a shard and checks its header and size; verify != 0 also checks the checksum. A path
 * ending in ".idx" opens a Megatron indexed dataset (megatron_open). */
int shard_open(zy_shard *s, const char *path, int verify);
void shard_close(zy_shard *s);
/* Copies tokens [start, start + n) as int32 into out [n] (every stored value fits: opening
 * checks). */
void shard_read(const zy_shard *s, uint64_t start, uint64_t n, int32_t *out);

#endif
