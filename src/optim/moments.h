/* AdamW's moments kept in bf16 (optimizer.adam_moments = bfloat16): the rounding they get, shared
 * by the CPU's reference loop (optim.c) and the GPU kernel (optim_cuda.cu), so both give the same
 * bits.
 *
 * Why stochastic rounding: the second moment moves by (1 - beta2) of itself a step. With beta2 =
 * 0.999 that is 0.1%, under half a bf16 unit (0.2-0.4%), so rounding to nearest would hold v
 * where it is and a shrinking gradient would never lower it. Rounding up with probability equal
 * to the remainder's share of a unit keeps E[v] on course at any beta.
 *
 * Why hashed: the random bits are a hash of (the element's index in the parameter buffer, the
 * step), not a generator's state, so they need no state of their own, are the same
 * on any device and any number of ranks (ZeRO-1 slices keep their global indices), and a resumed
 * run draws exactly what the uninterrupted one did. */
#ifndef ZY_OPTIM_MOMENTS_H
#define ZY_OPTIM_MOMENTS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ZY_MOMENTS_FN static __host__ __device__ __forceinline__
#else
#define ZY_MOMENTS_FN static inline
#endif

/* murmur3's 32-bit finaliser: every input bit reaches every output bit. */
ZY_MOMENTS_FN uint32_t zy_mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* The part of the hash that depends on the step and the index's high 32 bits only: a loop over
 * elements computes it once. */
ZY_MOMENTS_FN uint32_t zy_moment_key(uint64_t step, uint32_t index_hi) {
    return zy_mix32((uint32_t)step * 0x9e3779b9u ^ (uint32_t)(step >> 32) * 0x7feb352du ^
                    index_hi * 0x846ca68bu);
}

/* An element's 32 random bits: the low 16 round its first moment, the high 16 its second (one hash
 * an element, not two: on the GPU the hash is a good part of the update's arithmetic). */
ZY_MOMENTS_FN uint32_t zy_moment_bits(uint32_t key, uint32_t index_lo) {
    return zy_mix32(index_lo ^ key);
}

/* Element e's random bits, given key = zy_moment_key(step, hi0) of a loop's first element's high
 * index bits hi0: the key is recomputed only past a 2^32 boundary, so a loop hashes once an
 * element. */
ZY_MOMENTS_FN uint32_t zy_moment_bits_at(uint64_t e, uint64_t step, uint32_t key, uint32_t hi0) {
    const uint32_t hi = (uint32_t)(e >> 32);
    return zy_moment_bits(hi == hi0 ? key : zy_moment_key(step, hi), (uint32_t)e);
}

/* x rounded to bf16 stochastically with the random r16 (0 to 0xffff), returned as the fp32 value
 * it stands for (the low 16 bits zero): up with probability equal to the dropped bits' share of a
 * unit. Only the magnitude's bits move, so negative values round like positive ones. NaN and inf
 * pass through (a NaN stays a quiet NaN). */
ZY_MOMENTS_FN float zy_round_moment(float x, uint32_t r16) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) { /* finite: a carry into the exponent is correct */
        u += r16;
        u &= 0xffff0000u;
    } else if (u & 0x007fffffu) {
        u = (u | 0x00400000u) & 0xffff0000u;
    }
    float r;
    memcpy(&r, &u, 4);
    return r;
}

#endif
