/* Text files -> token shards (see prepare.h). */
#include "data/prepare.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "data/hashmap.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Text encoded per parallel batch, and the document size above which one document is encoded by
 * itself with tok_encode's own parallel split. */
#define BATCH_BYTES ((size_t)64 << 20)
#define BIG_DOC     ((size_t)8 << 20)
#define VAL_SALT    0x76616C5F73706C74ULL

zy_prepare_opts prepare_defaults(void) {
    zy_prepare_opts o = {0};
    o.val_fraction = 0.01;
    o.shard_tokens = 100000000ULL;
    o.doc_sep = DOCSEP_BLANK_LINE;
    return o;
}

static uint64_t doc_hash(const char *doc, size_t len) {
    return zy_hash_bytes(doc, len, VAL_SALT);
}

static int hash_is_val(uint64_t h, double frac) {
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < frac;
}

int prepare_is_val(const char *doc, size_t len, double val_fraction) {
    return hash_is_val(doc_hash(doc, len), val_fraction);
}

/* One split's output: tokens waiting for the next shard, and the shard names written. */
typedef struct {
    const char *name; /* "train" / "val" */
    const char *dir;
    zy_ids buf;
    uint64_t buf_docs; /* documents ending in buf */
    uint64_t shard_tokens;
    uint32_t vocab, eos;
    int nshards;
    uint64_t docs, tokens;
} split_writer;

static int flush_shard(split_writer *w, size_t n) {
    char file[64], path[4096];
    snprintf(file, sizeof file, "%s_%06d.bin", w->name, w->nshards);
    ZY_TRY(zy_path_join(path, sizeof path, w->dir, file));
    ZY_TRY(shard_write(path, w->buf.data, n, w->vocab, w->eos, w->buf_docs));
    memmove(w->buf.data, w->buf.data + n, (w->buf.n - n) * sizeof(int32_t));
    w->buf.n -= n;
    w->buf_docs = 0; /* a document cut across shards counts in the shard where it ends */
    w->nshards++;
    return ZY_OK;
}

static int add_doc(split_writer *w, const zy_ids *doc) {
    if (w->buf.n && w->buf.n + doc->n + 1 > w->shard_tokens)
        ZY_TRY(flush_shard(w, w->buf.n)); /* start the document in a fresh shard */
    ids_reserve(&w->buf, doc->n + 1);
    memcpy(w->buf.data + w->buf.n, doc->data, doc->n * sizeof(int32_t));
    w->buf.n += doc->n;
    w->buf.data[w->buf.n++] = (int32_t)w->eos;
    w->buf_docs++;
    w->docs++;
    w->tokens += doc->n + 1;
    while (w->buf.n > w->shard_tokens) { /* a document longer than a shard */
        uint64_t keep = w->buf_docs;
        w->buf_docs = 0;
        ZY_TRY(flush_shard(w, w->shard_tokens));
        w->buf_docs = keep;
    }
    return ZY_OK;
}

static int finish_split(split_writer *w) {
    if (w->buf.n) ZY_TRY(flush_shard(w, w->buf.n));
    return ZY_OK;
}

/* Encodes docs [n] into out [n] (plain text, no special tokens matched). */
static int encode_docs(const zy_tokenizer *t, const zy_span *docs, size_t n, zy_ids *out) {
    int nt = omp_get_max_threads(), failed = 0;
    char msg[512] = "";
    for (size_t i = 0; i < n; i++)
        if (docs[i].len >= BIG_DOC && tok_encode(t, docs[i].text, docs[i].len, 0, &out[i]) != ZY_OK)
            return ZY_ERR;
    tok_encoder **enc = zy_calloc((size_t)nt, sizeof *enc);
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t i = 0; i < n; i++) {
        if (docs[i].len >= BIG_DOC) continue;
        int tid = omp_get_thread_num();
        if (!enc[tid]) enc[tid] = tok_encoder_new(t);
        if (tok_encoder_encode(enc[tid], docs[i].text, docs[i].len, 0, &out[i]) != ZY_OK) {
#pragma omp critical(prepare_err)
            {
                if (!failed) snprintf(msg, sizeof msg, "%s", zy_errmsg());
                failed = 1;
            }
        }
    }
    for (int i = 0; i < nt; i++) tok_encoder_free(enc[i]);
    free(enc);
    return failed ? zy_fail("%s", msg) : ZY_OK;
}

/* Is path a folder this function may replace? (absent, or it has a zayac meta.json) */
static int replaceable(const char *dir) {
    if (!zy_path_exists(dir)) return 1;
    char meta[4096], *text;
    if (zy_path_join(meta, sizeof meta, dir, "meta.json") != ZY_OK) return 0;
    if (!zy_path_exists(meta) || zy_read_file(meta, &text, NULL) != ZY_OK) return 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *f = j ? cJSON_GetObjectItemCaseSensitive(j, "format") : NULL;
    int ok = cJSON_IsString(f) && strcmp(f->valuestring, "zayac-shards") == 0;
    cJSON_Delete(j);
    return ok;
}

static cJSON *split_json(const split_writer *w) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "docs", (double)w->docs);
    cJSON_AddNumberToObject(o, "tokens", (double)w->tokens);
    cJSON *a = cJSON_AddArrayToObject(o, "shards");
    for (int i = 0; i < w->nshards; i++) {
        char file[64];
        snprintf(file, sizeof file, "%s_%06d.bin", w->name, i);
        cJSON_AddItemToArray(a, cJSON_CreateString(file));
    }
    return o;
}

static int write_meta(const zy_prepare_opts *o, const char *dir, const zy_tokenizer *t,
                      const split_writer *w, char **files, int nfiles) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", "zayac-shards");
    cJSON_AddNumberToObject(m, "version", ZY_SHARD_VERSION);
    cJSON_AddStringToObject(m, "tokenizer", "tokenizer.json");
    cJSON_AddNumberToObject(m, "vocab_size", tok_vocab_size(t));
    cJSON_AddNumberToObject(m, "eos_id", tok_eos_id(t));
    cJSON_AddNumberToObject(m, "token_bytes", shard_token_bytes((uint32_t)tok_vocab_size(t)));
    cJSON_AddStringToObject(m, "doc_sep", docsep_name(o->doc_sep));
    cJSON_AddNumberToObject(m, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(m, "shard_tokens", (double)o->shard_tokens);
    cJSON *in = cJSON_AddArrayToObject(m, "inputs");
    for (int i = 0; i < nfiles; i++) cJSON_AddItemToArray(in, cJSON_CreateString(files[i]));
    cJSON_AddItemToObject(m, "train", split_json(&w[0]));
    cJSON_AddItemToObject(m, "val", split_json(&w[1]));
    char *s = cJSON_Print(m);
    cJSON_Delete(m);
    char path[4096];
    int rc = zy_path_join(path, sizeof path, dir, "meta.json");
    if (rc == ZY_OK) rc = zy_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}

static int copy_file(const char *from, const char *dir, const char *name) {
    char *text, path[4096];
    size_t len;
    ZY_TRY(zy_read_file(from, &text, &len));
    int rc = zy_path_join(path, sizeof path, dir, name);
    if (rc == ZY_OK) rc = zy_write_file_atomic(path, text, len);
    free(text);
    return rc;
}

/* Moves the finished temporary folder to out, replacing an older data folder. */
static int install_dir(const char *tmp, const char *out) {
    char old[4128];
    snprintf(old, sizeof old, "%s.old-%d", out, (int)getpid());
    int had = zy_path_exists(out);
    if (had && rename(out, old) != 0)
        return zy_fail_runtime("%s: cannot move the old folder aside", out);
    if (rename(tmp, out) != 0) {
        if (had) (void)rename(old, out);
        return zy_fail_runtime("%s: cannot rename %s into place", out, tmp);
    }
    if (had) (void)zy_remove_tree(old);
    return ZY_OK;
}

typedef struct {
    zy_mmap *maps;
    int nmaps;
    zy_spans docs;
    uint64_t *hash;
    uint8_t *is_val;
} corpus;

static void corpus_free(corpus *c) {
    for (int i = 0; i < c->nmaps; i++) zy_mmap_close(&c->maps[i]);
    free(c->maps);
    spans_free(&c->docs);
    free(c->hash);
    free(c->is_val);
}

/* Reads the files, cuts documents and assigns each to a split. */
static int load_corpus(const zy_prepare_opts *o, char **files, int nfiles, corpus *c,
                       zy_prepare_stats *st) {
    c->maps = zy_calloc((size_t)nfiles, sizeof *c->maps);
    for (int i = 0; i < nfiles; i++) {
        ZY_TRY(zy_mmap_open(&c->maps[i], files[i]));
        c->nmaps++;
        docs_split(c->maps[i].data, c->maps[i].size, o->doc_sep, &c->docs);
        st->bytes += c->maps[i].size;
    }
    if (c->docs.n == 0) return zy_fail("%s: no documents in the input", files[0]);
    size_t n = c->docs.n, nval = 0, lo = 0;
    c->hash = zy_malloc(n * sizeof *c->hash);
    c->is_val = zy_malloc(n);
    for (size_t i = 0; i < n; i++) {
        c->hash[i] = doc_hash(c->docs.d[i].text, c->docs.d[i].len);
        c->is_val[i] = (uint8_t)hash_is_val(c->hash[i], o->val_fraction);
        nval += c->is_val[i];
        if (c->hash[i] < c->hash[lo]) lo = i;
    }
    /* a small corpus may draw no validation document: take the one with the smallest hash */
    if (o->val_fraction > 0 && nval == 0 && n >= 2) c->is_val[lo] = 1;
    return ZY_OK;
}

static int prepare_into(const zy_prepare_opts *o, const char *tmp, char **files, int nfiles,
                        zy_prepare_stats *st) {
    zy_tokenizer *t;
    ZY_TRY(tok_load(&t, o->tokenizer));
    corpus c = {0};
    split_writer w[2] = {{0}, {0}};
    zy_ids *enc = NULL;
    int rc = ZY_OK;
    if (tok_eos_id(t) < 0)
        rc = zy_fail("%s: the tokenizer has no eos token (<|eos|>, <|endoftext|>, </s>, ...) to "
                     "separate documents",
                     o->tokenizer);
    if (rc == ZY_OK) rc = load_corpus(o, files, nfiles, &c, st);
    for (int s = 0; s < 2; s++) {
        w[s].name = s ? "val" : "train";
        w[s].dir = tmp;
        w[s].shard_tokens = o->shard_tokens;
        w[s].vocab = (uint32_t)tok_vocab_size(t);
        w[s].eos = (uint32_t)tok_eos_id(t);
    }
    for (size_t first = 0; rc == ZY_OK && first < c.docs.n;) {
        size_t last = first, bytes = 0;
        while (last < c.docs.n && (last == first || bytes + c.docs.d[last].len <= BATCH_BYTES))
            bytes += c.docs.d[last++].len;
        size_t n = last - first;
        enc = zy_calloc(n, sizeof *enc);
        rc = encode_docs(t, c.docs.d + first, n, enc);
        for (size_t i = 0; rc == ZY_OK && i < n; i++)
            rc = add_doc(&w[c.is_val[first + i]], &enc[i]);
        for (size_t i = 0; i < n; i++) ids_free(&enc[i]);
        free(enc);
        first = last;
    }
    for (int s = 0; s < 2 && rc == ZY_OK; s++) rc = finish_split(&w[s]);
    if (rc == ZY_OK) rc = copy_file(o->tokenizer, tmp, "tokenizer.json");
    if (rc == ZY_OK) rc = write_meta(o, tmp, t, w, files, nfiles);
    for (int s = 0; s < 2; s++) {
        st->docs[s] = w[s].docs;
        st->tokens[s] = w[s].tokens;
        st->shards[s] = w[s].nshards;
        ids_free(&w[s].buf);
    }
    corpus_free(&c);
    tok_free(t);
    return rc;
}

int data_prepare(const zy_prepare_opts *opts, zy_prepare_stats *st) {
    memset(st, 0, sizeof *st);
    double t0 = zy_now();
    char out[4000]; /* without trailing slashes, so "out.tmp-PID" is a sibling */
    size_t ol = strlen(opts->out_dir);
    while (ol > 1 && opts->out_dir[ol - 1] == '/') ol--;
    if (ol == 0 || ol >= sizeof out) return zy_fail("output folder '%s': bad path", opts->out_dir);
    memcpy(out, opts->out_dir, ol);
    out[ol] = 0;
    zy_prepare_opts o_copy = *opts;
    o_copy.out_dir = out;
    const zy_prepare_opts *o = &o_copy;
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return zy_fail("validation fraction %g: expected a number in [0, 1)", o->val_fraction);
    if (o->shard_tokens < 1) return zy_fail("shard size must be at least 1 token");
    if (!replaceable(o->out_dir))
        return zy_fail("%s: exists and is not a zayac data folder (no meta.json of format "
                       "zayac-shards); refusing to replace it",
                       o->out_dir);
    char **files;
    int nfiles;
    ZY_TRY(docs_expand_inputs(o->inputs, o->n_inputs, &files, &nfiles));
    st->files = nfiles;
    char tmp[4128];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", o->out_dir, (int)getpid());
    (void)zy_remove_tree(tmp);
    int rc = zy_mkdirs(tmp);
    if (rc == ZY_OK) rc = prepare_into(o, tmp, files, nfiles, st);
    if (rc == ZY_OK) rc = zy_fsync_path(tmp);
    if (rc == ZY_OK) rc = install_dir(tmp, o->out_dir);
    if (rc != ZY_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zy_errmsg());
        (void)zy_remove_tree(tmp);
        zy_fail("%s", msg);
    }
    docs_free_paths(files, nfiles);
    st->seconds = zy_now() - t0;
    return rc;
}
