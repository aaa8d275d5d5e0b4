/* Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx, "MMIDIDX" version 1) read as a token
 * shard, so pre-tokenized Megatron data trains without re-tokenizing.
 *
 * PREFIX.idx (little-endian):
 *   char[9]  magic "MMIDIDX\0\0"
 *   u64      version (1)
 *   u8       element type: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16 (6 and 7 are
 *            floating point: refused)
 *   u64      sequence count S
 *   u64      document index length D (documents + 1)
 *   i32[S]   sequence sizes, in elements
 *   i64[S]   sequence offsets into PREFIX.bin, in bytes
 *   i64[D]   the first sequence of each document, then S
 * PREFIX.bin holds the sequences' elements back to back. zayac reads the whole .bin as one token
 * stream (the sequences in order), so it checks that the offsets are exactly contiguous from 0 to
 * the end of the .bin, that the sizes and counts fit the files without overflow, that the
 * document index rises from 0 to S, and that every value is a token id in [0, 2^31). Any
 * failure is one error naming the file and the entry. The vocabulary, eos and tokenizer are not
 * recorded in this format (the shard header says 0). */
#ifndef ZY_MEGATRON_H
#define ZY_MEGATRON_H

#include "data/shard.h"

/* 1 if path names a Megatron index (ends in ".idx"). */
int megatron_is_idx_path(const char *path);
/* 1 if path ends in ".bin" and PREFIX.idx exists beside it. */
int megatron_idx_beside(const char *path);
/* Opens PREFIX.idx and maps PREFIX.bin as s (shard_close frees it). */
int megatron_open(zy_shard *s, const char *idx_path);

#endif
