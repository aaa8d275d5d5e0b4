/* Input files as byte streams, whatever their compression: plain, gzip (zlib; concatenated members
 * as pigz and bgzip write them) or zstd (libzstd; several frames). The kind is told by the file's
 * first bytes, not its name, so a misnamed file still reads right. A truncated or corrupt
 * compressed file is one error naming it; a failed read is a runtime failure. */
#ifndef ZY_INSTREAM_H
#define ZY_INSTREAM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    INSTREAM_PLAIN = 0,
    INSTREAM_GZIP = 1,
    INSTREAM_ZSTD = 2,
} zy_instream_kind;

typedef struct zy_instream zy_instream;

/* The compression that n leading bytes of a file announce (INSTREAM_PLAIN when none). */
zy_instream_kind instream_sniff(const uint8_t *head, size_t n);
const char *instream_kind_name(zy_instream_kind k);

/* Opens path for reading its decompressed bytes. */
int instream_open(zy_instream **out, const char *path);
/* Reads up to cap decompressed bytes into buf; *got = 0 means the end of the stream. */
int instream_read(zy_instream *s, void *buf, size_t cap, size_t *got);
zy_instream_kind instream_kind(const zy_instream *s);
/* Compressed bytes consumed so far (the file size once the stream is read to its end). */
uint64_t instream_file_bytes(const zy_instream *s);
void instream_close(zy_instream *s);

/* Reads a whole file, decompressed, into a NUL-terminated heap buffer (*len without the NUL);
 * *file_bytes (may be NULL) gets the size on disk. */
int instream_read_all(const char *path, char **out, size_t *len, uint64_t *file_bytes);

#endif
