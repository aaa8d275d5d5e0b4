/* bf16 <-> fp32 on the host: the one rounding (nearest, ties to even) every host-side bf16 uses
 * (safetensors, the MPI communicator's bf16 sums, the tests), so host and CUDA (__float2bfloat16)
 * round alike. Inline: reductions call them per element. */
#ifndef ZY_BASE_BF16_H
#define ZY_BASE_BF16_H

#include <stdint.h>
#include <string.h>

/* fp32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN). */
static inline uint16_t zy_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry into the
     * exponent is the correct result (up to inf). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 bits -> fp32 (exact). */
static inline float zy_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

#endif
