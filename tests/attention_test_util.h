/* Shared pieces of the attention tests (tests/test_cuda_attention.c,
 * dev/test_attention_variants.c): the GPU probe, a CUDA-call check that fails the test, and
 * random bf16 inputs. Include after <cmocka.h> in a CUDA build; the includer defines
 * `static zy_rng rng`. */
#ifndef ZY_TESTS_ATTENTION_TEST_UTIL_H
#define ZY_TESTS_ATTENTION_TEST_UTIL_H

#include "base/rng.h"
#include "io/safetensors.h" /* zy_f32_to_bf16, zy_bf16_to_f32 */

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

/* 1 when a CUDA device is usable. */
static int have_gpu(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                  \
    } while (0)

/* n random normal(0, sd) values rounded to bf16: bits in *bits, the same values as floats. */
static float *rand_bf16(size_t n, float sd, uint16_t **bits) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    uint16_t *b = malloc((n ? n : 1) * sizeof(uint16_t));
    assert_true(f != NULL && b != NULL);
    for (size_t i = 0; i < n; i++) {
        b[i] = zy_f32_to_bf16(zy_rng_normal(&rng) * sd);
        f[i] = zy_bf16_to_f32(b[i]);
    }
    *bits = b;
    return f;
}

#endif
