/* safetensors files: reading through a read-only mmap with full header validation, and atomic
 * writing (temporary file, fsync, rename). Floating tensors are converted to and from fp32 (BF16
 * and F16 are rounded to nearest even on write); I32/I64 are read as int32 with a range check.
 * Format: 8-byte little-endian header length N, N bytes of JSON, then the tensor bytes. Like the
 * reference Rust implementation (huggingface/safetensors, safetensors/src/tensor.rs,
 * Metadata::validate), the tensors' byte ranges must tile the data region exactly: no overlap, no
 * hole, and the last tensor ends at the end of the file. */
#ifndef ZY_SAFETENSORS_H
#define ZY_SAFETENSORS_H

#include "base/bf16.h"
#include "base/fileio.h"

#include <stddef.h>
#include <stdint.h>

#define ZY_ST_MAX_DIMS 8

/* Element types of the format. Only the first five convert; the others are accepted in a header (so
 * a file holding them opens) but reading such a tensor is an error naming it. */
typedef enum {
    ZY_ST_F32 = 0,
    ZY_ST_BF16,
    ZY_ST_F16,
    ZY_ST_I32,
    ZY_ST_I64,
    ZY_ST_F64,
    ZY_ST_BOOL,
    ZY_ST_U8,
    ZY_ST_I8,
    ZY_ST_I16,
    ZY_ST_U16,
    ZY_ST_U32,
    ZY_ST_U64,
    ZY_ST_F8_E4M3,
    ZY_ST_F8_E5M2,
    ZY_ST_DTYPE_COUNT
} zy_st_dtype;

/* One tensor of an open file. */
typedef struct {
    char *name;
    zy_st_dtype dtype;
    int ndim;                      /* 0 = scalar */
    int64_t shape[ZY_ST_MAX_DIMS]; /* C order */
    size_t numel;                  /* product of shape (1 for a scalar) */
    size_t begin, end;             /* byte range inside the data region */
} zy_st_tensor;

/* An open safetensors file (the mapping lives until safetensors_close). */
typedef struct {
    char *path;
    zy_mmap map;
    const uint8_t *data;   /* start of the data region (byte 8 + N of the file) */
    size_t data_size;      /* bytes */
    zy_st_tensor *tensors; /* in header order */
    int count;
    char **meta_keys, **meta_vals; /* the `__metadata__` string map */
    int meta_count;
} zy_safetensors;

/* The format's name of a dtype ("F32", "BF16", ...). */
const char *safetensors_dtype_name(zy_st_dtype dt);
/* Bytes per element of a dtype. */
size_t safetensors_dtype_size(zy_st_dtype dt);

/* Maps and validates a file; on error nothing is left open and the message names the file. */
int safetensors_open(zy_safetensors *f, const char *path);
/* Unmaps the file and frees the header. Safe on a zeroed or already closed struct. */
void safetensors_close(zy_safetensors *f);
/* Index of a tensor by name, or -1. */
int safetensors_find(const zy_safetensors *f, const char *name);
/* The value of a `__metadata__` key, or NULL. */
const char *safetensors_meta_get(const zy_safetensors *f, const char *key);
/* Formats a tensor's shape as "[a, b]" into buf. */
void safetensors_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* Converts tensor `idx` (F32, BF16, F16 or F64) to fp32 into out[numel]. */
int safetensors_read_index_f32(const zy_safetensors *f, int idx, float *out);
/* Reads the named tensor into out (fp32), requiring exactly the expected shape: a missing tensor,
 * another shape or a non-float dtype is an error naming the tensor, the file and both shapes. */
int safetensors_read_f32(const zy_safetensors *f, const char *name, int ndim, const int64_t *shape,
                         float *out);
/* Reads the named I32 or I64 tensor with the expected shape into out[numel] (I64 values must fit
 * in int32). */
int safetensors_read_i32(const zy_safetensors *f, const char *name, int ndim, const int64_t *shape,
                         int32_t *out);

/* One tensor to write: `data` holds numel fp32 values for F32/BF16/F16 (converted on write),
 * int32_t values for I32, int64_t values for I64. */
typedef struct {
    const char *name;
    zy_st_dtype dtype; /* stored dtype: F32, BF16, F16, I32 or I64 */
    int ndim;
    const int64_t *shape;
    const void *data;
} zy_st_write_item;

/* Writes a safetensors file atomically (path.tmp.<pid>, fsync, rename, fsync of the directory):
 * either the old file stays or the complete new one replaces it. Tensors are laid out in the
 * given order; `meta` holds n_meta key/value pairs (meta[2i], meta[2i+1]) for `__metadata__`. */
int safetensors_write(const char *path, const zy_st_write_item *items, int n_items,
                      const char *const *meta, int n_meta);

/* zy_f32_to_bf16 and zy_bf16_to_f32: base/bf16.h (included above). */
/* fp32 -> IEEE half bits, round to nearest even (overflow to inf, subnormals kept). */
uint16_t zy_f32_to_f16(float x);
/* IEEE half bits -> fp32 (exact). */
float zy_f16_to_f32(uint16_t h);

#endif
