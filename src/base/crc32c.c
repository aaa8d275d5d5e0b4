/* CRC-32C: the SSE4.2 crc32 instruction where the CPU has it (about 8 GB/s on one core: a
 * checkpoint's manifest checksums every byte it writes), else slicing-by-8 tables (1-2 GB/s). */
#include "base/crc32c.h"

#include <pthread.h>
#include <string.h>

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
}

static uint32_t crc_tables(uint32_t crc, const uint8_t *p, size_t len) {
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* little-endian hosts only (x86-64, aarch64) */
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

static int have_sse42;

static void setup(void) {
    build_table();
#if defined(__x86_64__)
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
/* The instruction computes the same reflected Castagnoli CRC as the tables, 8 bytes at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
                                                            size_t len) {
    uint64_t c = crc;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    crc = (uint32_t)c;
    while (len--) crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#endif

uint32_t zy_crc32c(uint32_t crc, const void *data, size_t len) {
    pthread_once(&table_once, setup);
#if defined(__x86_64__)
    if (have_sse42) return ~crc_sse42(~crc, data, len);
#endif
    return ~crc_tables(~crc, data, len);
}

uint32_t zy_crc32c_portable(uint32_t crc, const void *data, size_t len) {
    pthread_once(&table_once, setup);
    return ~crc_tables(~crc, data, len);
}
