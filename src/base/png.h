/* PNG encoding with no outside library: RGB8 pixels to a PNG file (row filters, a zlib stream of
 * fixed-Huffman deflate with LZ77 matching, CRC-32 chunks, Adler-32 trailer). Used by plot.c. */
#ifndef ZY_PNG_H
#define ZY_PNG_H

#include <stddef.h>
#include <stdint.h>

/* Encodes rgb[h][w][3] (rows top to bottom) as a PNG into a new heap buffer *out of *len bytes. */
void png_encode_rgb(const uint8_t *rgb, int w, int h, uint8_t **out, size_t *len);
/* Encodes rgb[h][w][3] as a PNG and writes it atomically to path (good data is never half
 * overwritten). */
int png_write_rgb(const char *path, const uint8_t *rgb, int w, int h);

#endif
