/* Text and JSONL files -> token shards (see prepare.h). */
#include "data/prepare.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "data/hashmap.h"
#include "data/docread.h"
#include "data/shard.h"
#include "data/tok_hash.h"
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
    o.format = DOCFMT_AUTO;
    o.text_field = "text";
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
    uint64_t tok_hash;
    int nshards;
    uint64_t docs, tokens;
} split_writer;

static int flush_shard(split_writer *w, size_t n) {
    char file[64], path[4096];
    snprintf(file, sizeof file, "%s_%06d.bin", w->name, w->nshards);
    ZY_TRY(zy_path_join(path, sizeof path, w->dir, file));
    ZY_TRY(shard_write(path, w->buf.data, n, w->vocab, w->eos, w->buf_docs, w->tok_hash));
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
                      const split_writer *w, char **files, int nfiles, const zy_prepare_stats *st) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", "zayac-shards");
    cJSON_AddNumberToObject(m, "version", ZY_SHARD_VERSION);
    cJSON_AddStringToObject(m, "tokenizer", "tokenizer.json");
    cJSON_AddNumberToObject(m, "vocab_size", tok_vocab_size(t));
    cJSON_AddNumberToObject(m, "eos_id", tok_eos_id(t));
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)st->tokenizer_hash);
    cJSON_AddStringToObject(m, "tokenizer_hash", hash);
    cJSON_AddNumberToObject(m, "token_bytes", shard_token_bytes((uint32_t)tok_vocab_size(t)));
    cJSON_AddStringToObject(m, "doc_sep", docsep_name(o->doc_sep));
    cJSON_AddNumberToObject(m, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(m, "shard_tokens", (double)o->shard_tokens);
    if (st->read.jsonl_files) {
        cJSON_AddStringToObject(m, "text_field", o->text_field);
        cJSON_AddNumberToObject(m, "jsonl_records", (double)st->read.jsonl.records);
        cJSON_AddNumberToObject(m, "jsonl_empty_texts", (double)st->read.jsonl.empty);
        cJSON_AddNumberToObject(m, "jsonl_bad_lines_skipped", (double)st->read.jsonl.bad);
    }
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

/* The run: the tokenizer, the two writers, the documents waiting to be encoded (their text
 * copied into one buffer), and the train document held back in case no document draws
 * validation (prepare.h). */
typedef struct {
    const zy_prepare_opts *o;
    zy_tokenizer *t;
    split_writer w[2];
    char *text; /* [text_len] pending documents, back to back */
    size_t text_len, text_cap;
    size_t *end; /* [n] end offset of each pending document in text */
    size_t n, cap;
    uint64_t ndocs, nval;
    zy_ids held; /* a train document not written yet */
    uint64_t held_hash;
    int have_held;
} prep;

static int route(prep *p, uint64_t hash, int is_val, zy_ids *ids) {
    p->ndocs++;
    if (is_val) {
        p->nval++;
        ZY_TRY(add_doc(&p->w[1], ids));
        if (p->have_held) { /* validation is not empty: the held document goes to train */
            p->have_held = 0;
            ZY_TRY(add_doc(&p->w[0], &p->held));
        }
        return ZY_OK;
    }
    if (p->o->val_fraction > 0 && p->nval == 0) { /* hold the smallest hash so far */
        if (!p->have_held || hash < p->held_hash) {
            if (p->have_held) ZY_TRY(add_doc(&p->w[0], &p->held));
            zy_ids t = p->held;
            p->held = *ids;
            *ids = t;
            p->held_hash = hash;
            p->have_held = 1;
            return ZY_OK;
        }
    }
    return add_doc(&p->w[0], ids);
}

/* Encodes and routes the pending documents. */
static int flush_pending(prep *p) {
    size_t n = p->n;
    if (!n) return ZY_OK;
    zy_span *docs = zy_malloc(n * sizeof *docs);
    for (size_t i = 0, at = 0; i < n; at = p->end[i++]) {
        docs[i].text = p->text + at;
        docs[i].len = p->end[i] - at;
    }
    zy_ids *enc = zy_calloc(n, sizeof *enc);
    int rc = encode_docs(p->t, docs, n, enc);
    for (size_t i = 0; rc == ZY_OK && i < n; i++) {
        uint64_t h = doc_hash(docs[i].text, docs[i].len);
        rc = route(p, h, hash_is_val(h, p->o->val_fraction), &enc[i]);
    }
    for (size_t i = 0; i < n; i++) ids_free(&enc[i]);
    free(enc);
    free(docs);
    p->n = 0;
    p->text_len = 0;
    return rc;
}

static int add_text(prep *p, const char *text, size_t len) {
    if (p->n && p->text_len + len > BATCH_BYTES) ZY_TRY(flush_pending(p));
    if (p->text_cap - p->text_len < len) {
        p->text_cap = p->text_len + len > 2 * p->text_cap ? p->text_len + len : 2 * p->text_cap;
        p->text = zy_realloc(p->text, p->text_cap);
    }
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 4096;
        p->end = zy_realloc(p->end, p->cap * sizeof *p->end);
    }
    memcpy(p->text + p->text_len, text, len);
    p->text_len += len;
    p->end[p->n++] = p->text_len;
    return ZY_OK;
}

static int add_text_cb(void *ctx, const char *text, size_t len) {
    return add_text(ctx, text, len);
}

/* Why a split came out empty, in words a user can act on. */
static void explain_empty(const prep *p, zy_prepare_stats *st) {
    double f = p->o->val_fraction;
    if (st->docs[1] == 0)
        snprintf(st->empty_why[1], sizeof st->empty_why[1],
                 f > 0 ? "%llu document%s, val-fraction %g -> 0 docs (holding one out takes 2 "
                         "documents or more)"
                       : "%llu document%s, val-fraction %g: no validation split asked for",
                 (unsigned long long)p->ndocs, p->ndocs == 1 ? "" : "s", f);
    if (st->docs[0] == 0)
        snprintf(st->empty_why[0], sizeof st->empty_why[0],
                 "%llu document%s, all drawn for validation (val-fraction %g)",
                 (unsigned long long)p->ndocs, p->ndocs == 1 ? "" : "s", f);
}

static int prepare_into(const zy_prepare_opts *o, const char *tmp, char **files, int nfiles,
                        zy_prepare_stats *st) {
    prep p = {0};
    p.o = o;
    ZY_TRY(tok_load(&p.t, o->tokenizer));
    int rc = ZY_OK;
    if (tok_eos_id(p.t) < 0)
        rc = zy_fail("%s: the tokenizer has no eos token (<|eos|>, <|endoftext|>, </s>, ...) to "
                     "separate documents",
                     o->tokenizer);
    st->tokenizer_hash = tok_vocab_hash(p.t);
    for (int s = 0; s < 2; s++) {
        p.w[s].name = s ? "val" : "train";
        p.w[s].dir = tmp;
        p.w[s].shard_tokens = o->shard_tokens;
        p.w[s].vocab = (uint32_t)tok_vocab_size(p.t);
        p.w[s].eos = (uint32_t)tok_eos_id(p.t);
        p.w[s].tok_hash = st->tokenizer_hash;
    }
    zy_docread_opts ro = {o->doc_sep, o->format, o->text_field, o->skip_bad_lines};
    for (int i = 0; i < nfiles && rc == ZY_OK; i++)
        rc = docread_file(files[i], &ro, add_text_cb, &p, &st->read);
    if (rc == ZY_OK) rc = flush_pending(&p);
    if (rc == ZY_OK && p.ndocs == 0) {
        if (st->read.jsonl.bad)
            rc = zy_fail("no documents in the input: every record was bad (%llu bad lines; the "
                         "first: %s)",
                         (unsigned long long)st->read.jsonl.bad, st->read.jsonl.first_bad);
        else
            rc = zy_fail("%s: no documents in the input", files[0]);
    }
    if (rc == ZY_OK && p.have_held) /* no document drew validation: give it the held one */
        rc = add_doc(&p.w[p.ndocs >= 2 ? 1 : 0], &p.held);
    for (int s = 0; s < 2 && rc == ZY_OK; s++) rc = finish_split(&p.w[s]);
    for (int s = 0; s < 2; s++) {
        st->docs[s] = p.w[s].docs;
        st->tokens[s] = p.w[s].tokens;
        st->shards[s] = p.w[s].nshards;
    }
    if (rc == ZY_OK) explain_empty(&p, st);
    if (rc == ZY_OK) rc = copy_file(o->tokenizer, tmp, "tokenizer.json");
    if (rc == ZY_OK) rc = write_meta(o, tmp, p.t, p.w, files, nfiles, st);
    for (int s = 0; s < 2; s++) ids_free(&p.w[s].buf);
    ids_free(&p.held);
    free(p.text);
    free(p.end);
    tok_free(p.t);
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
    if (o->text_field == NULL || !o->text_field[0]) return zy_fail("the JSONL text field is empty");
    if (zy_path_exists(o->out_dir) && !o->force)
        return zy_fail("%s: exists; --force replaces it (only a zayac data folder is ever "
                       "replaced)",
                       o->out_dir);
    if (!replaceable(o->out_dir))
        return zy_fail("%s: exists and is not a zayac data folder (no meta.json of format "
                       "zayac-shards); refusing to replace it",
                       o->out_dir);
    char **files;
    int nfiles;
    ZY_TRY(docs_expand_inputs(o->inputs, o->n_inputs, &files, &nfiles, &st->skipped));
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
