/* NumPy .npy arrays: the token and logit files the CLI exchanges with scripts. Reads versions 1.0,
 * 2.0 and 3.0 with dtypes '<f4', '<i4' and '<i8' (converted to int32 with a range check), C order,
 * any number of dimensions; writes version 1.0 '<f4' and '<i4' atomically. */
#ifndef ZY_NPY_H
#define ZY_NPY_H

#include <stddef.h>
#include <stdint.h>

#define ZY_NPY_MAX_DIMS 8

/* Element type held in memory after reading. */
typedef enum { ZY_NPY_F32 = 0, ZY_NPY_I32 = 1 } zy_npy_dtype;

typedef struct {
    zy_npy_dtype dtype;
    int ndim;                       /* 0 = scalar */
    int64_t shape[ZY_NPY_MAX_DIMS]; /* C order */
    size_t numel;                   /* product of shape (1 for a scalar) */
    void *data;                     /* float[numel] or int32_t[numel], heap */
} zy_npy;

/* Reads a .npy file; '<i8' becomes int32 (values must fit). Errors name the file. */
int npy_read(zy_npy *a, const char *path);
/* Reads a .npy file and requires the given element kind (F32: '<f4'; I32: '<i4' or '<i8'). */
int npy_read_as(zy_npy *a, const char *path, zy_npy_dtype want);
/* Frees the data of an array read by npy_read (safe on a zeroed struct). */
void npy_free(zy_npy *a);
/* Writes float32 data of the given shape as a version 1.0 '<f4' .npy file, atomically. */
int npy_write_f32(const char *path, int ndim, const int64_t *shape, const float *data);
/* Writes int32 data of the given shape as a version 1.0 '<i4' .npy file, atomically. */
int npy_write_i32(const char *path, int ndim, const int64_t *shape, const int32_t *data);
/* Formats an array's shape as "[a, b]" into buf. */
void npy_shape_str(const zy_npy *a, char *buf, size_t n);

#endif
