/* Counter-based random numbers: value i of stream s under seed k is a pure function of (k, s, i),
 * so any position can be replayed after a resume by restoring (seed, stream, counter). */
#ifndef ZY_RNG_H
#define ZY_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint64_t stream;
    uint64_t counter; /* how many 64-bit values have been drawn */
} zy_rng;

/* A generator at position 0 of stream `stream` under `seed`. */
zy_rng zy_rng_init(uint64_t seed, uint64_t stream);
/* The 64-bit value at (seed, stream, counter); pure. */
uint64_t zy_rng_at(uint64_t seed, uint64_t stream, uint64_t counter);
/* Draws the next 64-bit value and advances the counter. */
uint64_t zy_rng_u64(zy_rng *r);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
float zy_rng_uniform(zy_rng *r);
/* Uniform in [0, 1) double with 53 random bits. */
double zy_rng_uniform_f64(zy_rng *r);
/* Standard normal (Box-Muller on two draws). */
float zy_rng_normal(zy_rng *r);
/* Uniform integer in [0, n), unbiased. */
uint64_t zy_rng_below(zy_rng *r, uint64_t n);

#endif
