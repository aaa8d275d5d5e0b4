/* Counter-based RNG: a keyed mix of (seed, stream, counter) through two rounds of the
 * splitmix64/murmur3 finaliser; statistically fine for init, shuffling and sampling. */
#include "base/rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

zy_rng zy_rng_init(uint64_t seed, uint64_t stream) {
    zy_rng r = {seed, stream, 0};
    return r;
}

uint64_t zy_rng_at(uint64_t seed, uint64_t stream, uint64_t counter) {
    uint64_t key = mix64(seed ^ 0x9e3779b97f4a7c15ULL) ^ mix64(stream + 0x632be59bd9b4e019ULL);
    return mix64(key + mix64(counter * 0x9e3779b97f4a7c15ULL + 0xd1b54a32d192ed03ULL));
}

uint64_t zy_rng_u64(zy_rng *r) {
    return zy_rng_at(r->seed, r->stream, r->counter++);
}

float zy_rng_uniform(zy_rng *r) {
    return (float)(zy_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

double zy_rng_uniform_f64(zy_rng *r) {
    return (double)(zy_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

float zy_rng_normal(zy_rng *r) {
    double u1 = ((double)(zy_rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = zy_rng_uniform_f64(r);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t zy_rng_below(zy_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* reject the tail to stay unbiased */
    uint64_t x;
    do x = zy_rng_u64(r);
    while (x >= limit);
    return x % n;
}
