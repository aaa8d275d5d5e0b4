/* PNG encoder (see png.h). Deflate here is one final block of the fixed Huffman codes of RFC 1951
 * with greedy LZ77 matching: plots are mostly flat colour, so long matches (the white background,
 * repeated rows under the Up filter) do most of the work and a dynamic Huffman table would buy
 * little. tests/test_plot.c decodes the output with an independent inflater. */
#include "base/png.h"

#include "base/err.h"
#include "base/fileio.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* PNG encoding */

typedef struct {
    uint8_t *p;
    size_t len, cap;
    uint64_t bits; /* pending bits, least significant first (deflate's bit order) */
    int nbits;
} outbuf;

static void out_reserve(outbuf *o, size_t more) {
    if (o->len + more <= o->cap) return;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->len + more) cap *= 2;
    o->p = zy_realloc(o->p, cap);
    o->cap = cap;
}

static void out_bytes(outbuf *o, const void *data, size_t n) {
    out_reserve(o, n);
    memcpy(o->p + o->len, data, n);
    o->len += n;
}

static void out_u32be(outbuf *o, uint32_t v) {
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    out_bytes(o, b, 4);
}

/* Appends the n low bits of v, least significant first. */
static void out_bits(outbuf *o, uint32_t v, int n) {
    o->bits |= (uint64_t)v << o->nbits;
    o->nbits += n;
    while (o->nbits >= 8) {
        uint8_t b = (uint8_t)o->bits;
        out_bytes(o, &b, 1);
        o->bits >>= 8;
        o->nbits -= 8;
    }
}

/* Appends a Huffman code: deflate stores codes most significant bit first. */
static void out_code(outbuf *o, uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; i++) r |= ((code >> i) & 1u) << (len - 1 - i);
    out_bits(o, r, len);
}

static void out_flush_bits(outbuf *o) {
    if (o->nbits > 0) out_bits(o, 0, 8 - o->nbits);
}

/* Fixed-Huffman literal/length code of symbol s (0..287), RFC 1951 section 3.2.6. */
static void out_litlen(outbuf *o, int s) {
    if (s < 144)
        out_code(o, 0x30 + s, 8);
    else if (s < 256)
        out_code(o, 0x190 + (s - 144), 9);
    else if (s < 280)
        out_code(o, s - 256, 7);
    else
        out_code(o, 0xC0 + (s - 280), 8);
}

#define WIN       32768
#define HASH_BITS 15
#define MAX_CHAIN 48
#define MIN_MATCH 3
#define MAX_MATCH 258

/* Writes src as one final fixed-Huffman deflate block, matching repeats with LZ77 (hash chains of
 * 3-byte prefixes, greedy, window 32 KiB). Plots are mostly flat colour: matches do the work. */
static void deflate_fixed(outbuf *o, const uint8_t *src, size_t n) {
    int len_base[29], len_extra[29], dist_base[30], dist_extra[30];
    for (int i = 0; i < 28; i++) {
        len_extra[i] = i < 8 ? 0 : (i - 4) / 4;
        len_base[i] = i ? len_base[i - 1] + (1 << len_extra[i - 1]) : 3;
    }
    len_base[28] = 258, len_extra[28] = 0;
    for (int i = 0; i < 30; i++) {
        dist_extra[i] = i < 4 ? 0 : i / 2 - 1;
        dist_base[i] = i ? dist_base[i - 1] + (1 << dist_extra[i - 1]) : 1;
    }
    int32_t *head = zy_malloc(sizeof(int32_t) << HASH_BITS);
    int32_t *prev = zy_malloc(sizeof(int32_t) * WIN);
    for (int i = 0; i < (1 << HASH_BITS); i++) head[i] = -1;

    out_bits(o, 1, 1); /* BFINAL */
    out_bits(o, 1, 2); /* BTYPE = 01, fixed Huffman */
    size_t i = 0;
#define HASH_AT(k)                                                                                 \
    ((((uint32_t)src[k] << 16 | (uint32_t)src[k + 1] << 8 | src[k + 2]) * 2654435761u) >>          \
     (32 - HASH_BITS))
#define INSERT(k)                                                                                  \
    do {                                                                                           \
        uint32_t h_ = HASH_AT(k);                                                                  \
        prev[(k) & (WIN - 1)] = head[h_];                                                          \
        head[h_] = (int32_t)(k);                                                                   \
    } while (0)
    while (i < n) {
        int best = 0;
        size_t best_dist = 0;
        if (i + MIN_MATCH <= n) {
            size_t limit = n - i < MAX_MATCH ? n - i : MAX_MATCH;
            int32_t cand = head[HASH_AT(i)];
            for (int chain = 0; cand >= 0 && chain < MAX_CHAIN; chain++) {
                size_t d = i - (size_t)cand;
                if (d > WIN) break;
                if (src[cand + best] == src[i + best]) {
                    size_t l = 0;
                    while (l < limit && src[cand + l] == src[i + l]) l++;
                    if ((int)l > best) {
                        best = (int)l;
                        best_dist = d;
                        if (l == limit) break;
                    }
                }
                int32_t next = prev[cand & (WIN - 1)];
                if (next >= cand) break; /* slot reused by a newer position: chain ends */
                cand = next;
            }
        }
        if (best >= MIN_MATCH) {
            int ls = 28;
            while (len_base[ls] > best) ls--;
            out_litlen(o, 257 + ls);
            if (len_extra[ls]) out_bits(o, (uint32_t)(best - len_base[ls]), len_extra[ls]);
            int ds = 29;
            while (dist_base[ds] > (int)best_dist) ds--;
            out_code(o, (uint32_t)ds, 5);
            if (dist_extra[ds]) out_bits(o, (uint32_t)(best_dist - dist_base[ds]), dist_extra[ds]);
            for (size_t k = i; k < i + (size_t)best; k++)
                if (k + MIN_MATCH <= n) INSERT(k);
            i += (size_t)best;
        } else {
            out_litlen(o, src[i]);
            if (i + MIN_MATCH <= n) INSERT(i);
            i++;
        }
    }
#undef INSERT
#undef HASH_AT
    out_litlen(o, 256); /* end of block */
    out_flush_bits(o);
    free(head);
    free(prev);
}

/* CRC-32 (IEEE, reflected polynomial 0xEDB88320) as PNG chunks use it; table built per call. */
static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* Adler-32 of the uncompressed zlib payload. */
static uint32_t adler32(const uint8_t *p, size_t n) {
    uint32_t a = 1, b = 0;
    while (n > 0) {
        size_t k = n < 5552 ? n : 5552; /* the most bytes before b can overflow 32 bits */
        n -= k;
        while (k--) {
            a += *p++;
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    return b << 16 | a;
}

static void png_chunk(outbuf *o, const char *type, const uint8_t *data, size_t n) {
    out_u32be(o, (uint32_t)n);
    size_t start = o->len;
    out_bytes(o, type, 4);
    if (n) out_bytes(o, data, n);
    out_u32be(o, crc32_png(o->p + start, n + 4));
}

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return (pa <= pb && pa <= pc) ? a : pb <= pc ? b : c;
}

/* Filters each row with the PNG filter (None, Sub, Up, Average, Paeth) whose output has the
 * smallest sum of absolute signed bytes, the usual heuristic. Returns h * (1 + 3w) bytes. */
static uint8_t *png_filter(const uint8_t *rgb, int w, int h, size_t *out_len) {
    size_t stride = (size_t)w * 3, row_len = stride + 1;
    uint8_t *out = zy_malloc(row_len * h);
    uint8_t *cand = zy_malloc(stride * 5);
    for (int y = 0; y < h; y++) {
        const uint8_t *cur = rgb + y * stride, *up = y ? cur - stride : NULL;
        long best_cost = -1;
        int best = 0;
        for (int f = 0; f < 5; f++) {
            uint8_t *d = cand + f * stride;
            long cost = 0;
            for (size_t i = 0; i < stride; i++) {
                int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0,
                    cc = (i >= 3 && up) ? up[i - 3] : 0;
                int pred = f == 0   ? 0
                           : f == 1 ? a
                           : f == 2 ? b
                           : f == 3 ? (a + b) / 2
                                    : paeth(a, b, cc);
                d[i] = (uint8_t)(cur[i] - pred);
                cost += abs((int8_t)d[i]);
            }
            if (best_cost < 0 || cost < best_cost) best_cost = cost, best = f;
        }
        out[y * row_len] = (uint8_t)best;
        memcpy(out + y * row_len + 1, cand + best * stride, stride);
    }
    free(cand);
    *out_len = row_len * h;
    return out;
}

void png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len) {
    ZY_CHECK(w > 0 && h > 0 && rgb);
    size_t raw_len;
    uint8_t *raw = png_filter(rgb, w, h, &raw_len);
    outbuf z = {0};
    out_bytes(&z, "\x78\x01", 2); /* zlib header: deflate, 32 KiB window, no dictionary */
    deflate_fixed(&z, raw, raw_len);
    out_u32be(&z, adler32(raw, raw_len));
    free(raw);

    outbuf png = {0};
    out_bytes(&png, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13] = {0};
    for (int i = 0; i < 4; i++) {
        ihdr[i] = (uint8_t)((uint32_t)w >> (24 - 8 * i));
        ihdr[4 + i] = (uint8_t)((uint32_t)h >> (24 - 8 * i));
    }
    ihdr[8] = 8; /* bits per channel */
    ihdr[9] = 2; /* colour type: RGB; compression, filter method and interlace stay 0 */
    png_chunk(&png, "IHDR", ihdr, sizeof ihdr);
    png_chunk(&png, "IDAT", z.p, z.len);
    png_chunk(&png, "IEND", NULL, 0);
    free(z.p);
    *out = png.p;
    *len = png.len;
}

int png_write_rgb(const char *path, const uint8_t *rgb, int w, int h) {
    uint8_t *png;
    size_t len;
    png_encode_rgb(rgb, w, h, &png, &len);
    int rc = zy_write_file_atomic(path, png, len);
    free(png);
    return rc;
}
