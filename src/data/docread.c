/* A file's documents by its format (see docread.h). */
#include "data/docread.h"
#include "base/err.h"
#include "base/fileio.h"
#include "data/instream.h"

#include <stdio.h>
#include <stdlib.h>

zy_docread_opts docread_defaults(zy_docsep sep) {
    zy_docread_opts o = {sep, DOCFMT_AUTO, "text", 0};
    return o;
}

/* A text file: a plain one is mapped, a compressed one decompressed whole; then cut. */
static int read_text(const char *path, const zy_docread_opts *o, zy_doc_fn fn, void *ctx,
                     zy_docread_stats *st) {
    zy_mmap m = {0};
    char *heap = NULL;
    const char *text;
    size_t len;
    ZY_TRY(zy_mmap_open(&m, path));
    if (instream_sniff(m.data, m.size) == INSTREAM_PLAIN) {
        text = m.data;
        len = m.size;
        st->file_bytes += m.size;
    } else {
        zy_mmap_close(&m);
        uint64_t on_disk = 0;
        ZY_TRY(instream_read_all(path, &heap, &len, &on_disk));
        text = heap;
        st->file_bytes += on_disk;
        st->compressed_files++;
    }
    zy_spans docs = {0};
    docs_split(text, len, o->sep, &docs);
    st->bytes += len;
    int rc = ZY_OK;
    for (size_t i = 0; i < docs.n && rc == ZY_OK; i++) rc = fn(ctx, docs.d[i].text, docs.d[i].len);
    spans_free(&docs);
    zy_mmap_close(&m);
    free(heap);
    return rc;
}

static int read_jsonl(const char *path, const zy_docread_opts *o, zy_doc_fn fn, void *ctx,
                      zy_docread_stats *st) {
    zy_jsonl *r;
    ZY_TRY(jsonl_open(&r, path, o->text_field, o->skip_bad_lines));
    if (jsonl_compressed(r)) st->compressed_files++;
    const char *text;
    size_t len;
    int rc;
    while ((rc = jsonl_next(r, &text, &len)) == 1) {
        st->bytes += len;
        if ((rc = fn(ctx, text, len)) != ZY_OK) break;
    }
    uint64_t before = st->jsonl.file_bytes;
    jsonl_add_counts(r, &st->jsonl);
    st->file_bytes += st->jsonl.file_bytes - before;
    st->jsonl_files++;
    jsonl_close(r);
    return rc == 0 ? ZY_OK : ZY_ERR;
}

int docread_file(const char *path, const zy_docread_opts *o, zy_doc_fn fn, void *ctx,
                 zy_docread_stats *st) {
    st->files++;
    if (docfmt_of(path, o->format) == DOCFMT_JSONL) return read_jsonl(path, o, fn, ctx, st);
    return read_text(path, o, fn, ctx, st);
}
