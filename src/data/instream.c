/* Plain, gzip and zstd files as one byte stream (see instream.h). */
#include "data/instream.h"
#include "base/err.h"
#include "base/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define IN_CHUNK ((size_t)1 << 18)

struct zy_instream {
    FILE *f;
    char *path;
    zy_instream_kind kind;
    uint8_t *in; /* [IN_CHUNK] compressed bytes read from f */
    size_t in_pos, in_len;
    int file_eof;
    uint64_t file_bytes;
    z_stream z;
    int z_live;      /* z is initialised */
    int member_done; /* gzip: the last inflate call ended a member */
    ZSTD_DCtx *zstd;
    size_t zstd_pending; /* ZSTD_decompressStream's last hint: 0 at a frame end */
};

zy_instream_kind instream_sniff(const uint8_t *head, size_t n) {
    if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b) return INSTREAM_GZIP;
    if (n >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd)
        return INSTREAM_ZSTD;
    return INSTREAM_PLAIN;
}

const char *instream_kind_name(zy_instream_kind k) {
    return k == INSTREAM_GZIP ? "gzip" : k == INSTREAM_ZSTD ? "zstd" : "plain";
}

/* Refills the compressed buffer when it is empty; at the end of the file in_len stays 0. */
static int fill(zy_instream *s) {
    if (s->in_pos < s->in_len || s->file_eof) return ZY_OK;
    s->in_pos = 0;
    s->in_len = fread(s->in, 1, IN_CHUNK, s->f);
    s->file_bytes += s->in_len;
    if (s->in_len < IN_CHUNK) {
        if (ferror(s->f)) return zy_fail_runtime("%s: read failed: %s", s->path, strerror(errno));
        s->file_eof = 1;
    }
    return ZY_OK;
}

static int at_end_of_input(zy_instream *s) {
    return s->in_pos == s->in_len && s->file_eof;
}

int instream_open(zy_instream **out, const char *path) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return zy_fail_errno(path, "cannot open", errno);
    zy_instream *s = zy_calloc(1, sizeof *s);
    s->f = f;
    s->path = zy_strdup(path);
    s->in = zy_malloc(IN_CHUNK);
    int rc = fill(s);
    if (rc == ZY_OK) s->kind = instream_sniff(s->in, s->in_len);
    if (rc == ZY_OK && s->kind == INSTREAM_GZIP) {
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
            rc = zy_fail_runtime("%s: zlib cannot start a gzip decoder", path);
        else
            s->z_live = 1;
    }
    if (rc == ZY_OK && s->kind == INSTREAM_ZSTD && !(s->zstd = ZSTD_createDCtx()))
        rc = zy_fail_runtime("%s: libzstd cannot start a decoder", path);
    if (rc != ZY_OK) {
        instream_close(s);
        return ZY_ERR;
    }
    *out = s;
    return ZY_OK;
}

static int read_plain(zy_instream *s, uint8_t *buf, size_t cap, size_t *got) {
    while (*got < cap) {
        ZY_TRY(fill(s));
        if (s->in_pos == s->in_len) break;
        size_t n = s->in_len - s->in_pos < cap - *got ? s->in_len - s->in_pos : cap - *got;
        memcpy(buf + *got, s->in + s->in_pos, n);
        s->in_pos += n;
        *got += n;
    }
    return ZY_OK;
}

static int read_gzip(zy_instream *s, uint8_t *buf, size_t cap, size_t *got) {
    while (*got < cap) {
        ZY_TRY(fill(s));
        if (s->member_done) { /* another member may follow (pigz, bgzip, cat a.gz b.gz) */
            if (at_end_of_input(s)) break;
            if (inflateReset(&s->z) != Z_OK)
                return zy_fail_runtime("%s: zlib cannot restart the gzip decoder", s->path);
            s->member_done = 0;
        }
        if (at_end_of_input(s))
            return zy_fail("%s: truncated gzip data (the file ends inside a compressed member)",
                           s->path);
        s->z.next_in = s->in + s->in_pos;
        s->z.avail_in = (uInt)(s->in_len - s->in_pos);
        s->z.next_out = buf + *got;
        s->z.avail_out = (uInt)(cap - *got > UINT32_MAX ? UINT32_MAX : cap - *got);
        uInt out_before = s->z.avail_out;
        int zr = inflate(&s->z, Z_NO_FLUSH);
        s->in_pos = s->in_len - s->z.avail_in;
        *got += out_before - s->z.avail_out;
        if (zr == Z_STREAM_END)
            s->member_done = 1;
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            return zy_fail("%s: corrupt gzip data (zlib: %s)", s->path,
                           s->z.msg ? s->z.msg : zError(zr));
    }
    return ZY_OK;
}

static int read_zstd(zy_instream *s, uint8_t *buf, size_t cap, size_t *got) {
    while (*got < cap) {
        ZY_TRY(fill(s));
        if (at_end_of_input(s)) {
            if (s->zstd_pending != 0)
                return zy_fail("%s: truncated zstd data (the file ends inside a frame)", s->path);
            break;
        }
        ZSTD_inBuffer in = {s->in, s->in_len, s->in_pos};
        ZSTD_outBuffer o = {buf, cap, *got};
        size_t r = ZSTD_decompressStream(s->zstd, &o, &in);
        if (ZSTD_isError(r))
            return zy_fail("%s: corrupt zstd data (libzstd: %s)", s->path, ZSTD_getErrorName(r));
        s->zstd_pending = r;
        s->in_pos = in.pos;
        *got = o.pos;
    }
    return ZY_OK;
}

int instream_read(zy_instream *s, void *buf, size_t cap, size_t *got) {
    *got = 0;
    if (s->kind == INSTREAM_GZIP) return read_gzip(s, buf, cap, got);
    if (s->kind == INSTREAM_ZSTD) return read_zstd(s, buf, cap, got);
    return read_plain(s, buf, cap, got);
}

zy_instream_kind instream_kind(const zy_instream *s) {
    return s->kind;
}

uint64_t instream_file_bytes(const zy_instream *s) {
    return s->file_bytes;
}

void instream_close(zy_instream *s) {
    if (!s) return;
    if (s->z_live) inflateEnd(&s->z);
    ZSTD_freeDCtx(s->zstd);
    if (s->f) fclose(s->f);
    free(s->in);
    free(s->path);
    free(s);
}

int instream_read_all(const char *path, char **out, size_t *len, uint64_t *file_bytes) {
    *out = NULL;
    *len = 0;
    zy_instream *s;
    ZY_TRY(instream_open(&s, path));
    size_t n = 0, cap = IN_CHUNK;
    char *buf = zy_malloc(cap + 1);
    int rc = ZY_OK;
    for (;;) {
        if (cap - n < IN_CHUNK) {
            cap *= 2;
            buf = zy_realloc(buf, cap + 1);
        }
        size_t got;
        rc = instream_read(s, buf + n, cap - n, &got);
        if (rc != ZY_OK || got == 0) break;
        n += got;
    }
    if (file_bytes) *file_bytes = instream_file_bytes(s);
    instream_close(s);
    if (rc != ZY_OK) {
        free(buf);
        return ZY_ERR;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return ZY_OK;
}
