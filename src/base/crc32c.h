/* CRC-32C (Castagnoli), used for checkpoint manifests and TensorBoard record framing. */
#ifndef ZY_CRC32C_H
#define ZY_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C over len bytes (start with crc = 0). */
uint32_t zy_crc32c(uint32_t crc, const void *data, size_t len);
/* The same value from the lookup tables alone (what a CPU without SSE4.2 computes); for tests. */
uint32_t zy_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
