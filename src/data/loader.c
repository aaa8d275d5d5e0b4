/* The deterministic, resumable data loader (see loader.h). */
#include "data/loader.h"
#include "base/err.h"
#include "base/rng.h"
#include "data/shard.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* RNG streams: the source draw of each row, and the permutation keys of source s (base + s). */
#define STREAM_MIX  0x6D6978ULL
#define STREAM_PERM 0x7065726D00ULL

typedef struct {
    zy_shard *shards; /* [nshards] */
    int nshards;
    uint64_t *first; /* [nshards + 1] index of each shard's first window; first[n] = windows */
    double cum;      /* cumulative normalised weight up to and including this source */
} source;

struct zy_loader {
    zy_loader_opts o;
    source src[ZY_LOADER_MAX_SOURCES];
    int nsrc;
    uint32_t vocab, eos;                    /* of the shards that record one (vocab 0: none does) */
    uint64_t tok_hash;                      /* of the shards that record one (0: none does) */
    const char *tok_hash_from, *vocab_from; /* the first shard recording each */
    zy_loader_state st;
};

zy_loader_opts loader_defaults(void) {
    zy_loader_opts o = {8, 256, 0, 1, 0, 1, 1};
    return o;
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t loader_permute(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    if (bits < 2) bits = 2;
    bits += bits & 1; /* two equal halves, covering at most 4n values */
    int h = bits / 2;
    uint64_t mask = (h == 64) ? ~0ULL : (1ULL << h) - 1, x = i;
    do { /* cycle walking: values >= n are permuted again until they land inside */
        uint64_t L = x >> h, R = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t f = mix(R ^ mix(key + (uint64_t)r * 0x9e3779b97f4a7c15ULL)) & mask;
            uint64_t t = R;
            R = L ^ f;
            L = t;
        }
        x = (L << h) | R;
    } while (x >= n);
    return x;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard files of a source: the file itself, or <split>_*.bin in a folder, sorted. */
static int list_shards(const zy_loader_source *s, char ***out, int *n) {
    struct stat st;
    *out = NULL;
    *n = 0;
    if (stat(s->path, &st) != 0) return zy_fail("%s: cannot open: %s", s->path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        *out = zy_malloc(sizeof **out);
        (*out)[0] = zy_strdup(s->path);
        *n = 1;
        return ZY_OK;
    }
    const char *split = s->split ? s->split : "train";
    size_t pl = strlen(split);
    DIR *d = opendir(s->path);
    if (!d) return zy_fail("%s: cannot open directory: %s", s->path, strerror(errno));
    char **names = NULL;
    int cnt = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > pl + 5 && strncmp(e->d_name, split, pl) == 0 && e->d_name[pl] == '_' &&
            strcmp(e->d_name + l - 4, ".bin") == 0) {
            names = zy_realloc(names, (size_t)(cnt + 1) * sizeof *names);
            size_t fl = strlen(s->path) + l + 2;
            names[cnt] = zy_malloc(fl);
            snprintf(names[cnt], fl, "%s/%s", s->path, e->d_name);
            cnt++;
        }
    }
    closedir(d);
    if (cnt == 0) return zy_fail("%s: no %s_*.bin shards in this folder", s->path, split);
    qsort(names, (size_t)cnt, sizeof *names, cmp_str);
    *out = names;
    *n = cnt;
    return ZY_OK;
}

static int open_source(zy_loader *l, int k, const zy_loader_source *s) {
    char **files;
    int n;
    ZY_TRY(list_shards(s, &files, &n));
    source *src = &l->src[k];
    src->shards = zy_calloc((size_t)n, sizeof *src->shards);
    src->first = zy_calloc((size_t)n + 1, sizeof *src->first);
    int rc = ZY_OK;
    for (int i = 0; i < n && rc == ZY_OK; i++) {
        rc = shard_open(&src->shards[i], files[i], l->o.verify);
        if (rc != ZY_OK) break;
        src->nshards++;
        const zy_shard_header *h = &src->shards[i].h;
        const char *path = src->shards[i].path;
        if (h->vocab_size && !l->vocab) { /* Megatron shards record no vocabulary */
            l->vocab = h->vocab_size;
            l->eos = h->eos_id;
            l->vocab_from = path;
        } else if (h->vocab_size && (h->vocab_size != l->vocab || h->eos_id != l->eos)) {
            rc = zy_fail("%s: vocabulary %u / eos %u differs from %s's %u / %u (shards of "
                         "different tokenizers)",
                         files[i], h->vocab_size, h->eos_id, l->vocab_from, l->vocab, l->eos);
            break;
        }
        if (h->tokenizer_hash && !l->tok_hash) {
            l->tok_hash = h->tokenizer_hash;
            l->tok_hash_from = path;
        } else if (h->tokenizer_hash && h->tokenizer_hash != l->tok_hash) {
            rc = zy_fail("%s: tokenizer hash %016llx differs from %s's %016llx (shards of "
                         "different tokenizers)",
                         files[i], (unsigned long long)h->tokenizer_hash, l->tok_hash_from,
                         (unsigned long long)l->tok_hash);
            break;
        }
        uint64_t nt = h->ntokens, T = (uint64_t)l->o.T;
        src->first[i + 1] = src->first[i] + (nt > T ? (nt - 1) / T : 0);
    }
    if (rc == ZY_OK && src->first[src->nshards] == 0)
        rc = zy_fail("%s: no shard holds %d tokens (one window of T+1)", s->path, l->o.T + 1);
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
    return rc;
}

int loader_open(zy_loader **out, const zy_loader_source *src, int n, const zy_loader_opts *o) {
    *out = NULL;
    if (n < 1 || n > ZY_LOADER_MAX_SOURCES)
        return zy_fail("data loader: %d sources, expected 1 to %d", n, ZY_LOADER_MAX_SOURCES);
    if (o->B < 1 || o->T < 1 || o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return zy_fail("data loader: bad shape B=%d T=%d rank %d of %d", o->B, o->T, o->rank,
                       o->world);
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (!(src[i].weight > 0))
            return zy_fail("%s: source weight %g, expected a positive number", src[i].path,
                           src[i].weight);
        total += src[i].weight;
    }
    zy_loader *l = zy_calloc(1, sizeof *l);
    l->o = *o;
    l->nsrc = n;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        if (open_source(l, i, &src[i]) != ZY_OK) {
            loader_free(l);
            return ZY_ERR;
        }
        acc += src[i].weight / total;
        l->src[i].cum = i == n - 1 ? 2.0 : acc; /* the last source takes every draw left */
    }
    l->st.version = ZY_LOADER_STATE_VERSION;
    l->st.seed = o->seed;
    l->st.nsrc = (uint64_t)n;
    *out = l;
    return ZY_OK;
}

void loader_free(zy_loader *l) {
    if (!l) return;
    for (int i = 0; i < l->nsrc; i++) {
        for (int j = 0; j < l->src[i].nshards; j++) shard_close(&l->src[i].shards[j]);
        free(l->src[i].shards);
        free(l->src[i].first);
    }
    free(l);
}

static int pick_source(const zy_loader *l, uint64_t global_row) {
    if (l->nsrc == 1) return 0;
    double u =
        (double)(zy_rng_at(l->o.seed, STREAM_MIX, global_row) >> 11) * (1.0 / 9007199254740992.0);
    int s = 0;
    while (u >= l->src[s].cum) s++;
    return s;
}

/* The window of source s's c-th draw. */
static void locate(const zy_loader *l, int s, uint64_t c, zy_loader_row *r) {
    const source *src = &l->src[s];
    uint64_t W = src->first[src->nshards], e = c / W, i = c % W;
    uint64_t w =
        l->o.shuffle ? loader_permute(i, W, zy_rng_at(l->o.seed, STREAM_PERM + (uint64_t)s, e)) : i;
    int lo = 0, hi = src->nshards - 1; /* the shard whose windows contain w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (src->first[mid] <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    r->source = s;
    r->shard = lo;
    r->offset = (w - src->first[lo]) * (uint64_t)l->o.T;
    r->epoch = e;
}

void loader_next(zy_loader *l, int32_t *batch, zy_loader_row *rows) {
    uint64_t G = (uint64_t)l->o.B * (uint64_t)l->o.world, mine = (uint64_t)l->o.rank * l->o.B;
    for (uint64_t j = 0; j < G; j++) {
        int s = pick_source(l, l->st.step * G + j);
        uint64_t c = l->st.drawn[s]++;
        if (j < mine || j >= mine + (uint64_t)l->o.B) continue; /* another rank's row */
        zy_loader_row r;
        locate(l, s, c, &r);
        uint64_t b = j - mine;
        shard_read(&l->src[s].shards[r.shard], r.offset, (uint64_t)l->o.T + 1,
                   batch + b * ((uint64_t)l->o.T + 1));
        if (rows) rows[b] = r;
    }
    l->st.step++;
}

void loader_get_state(const zy_loader *l, zy_loader_state *st) {
    *st = l->st;
}

int loader_set_state(zy_loader *l, const zy_loader_state *st) {
    if (st->version != ZY_LOADER_STATE_VERSION)
        return zy_fail("data loader state version %llu, this build reads %d",
                       (unsigned long long)st->version, ZY_LOADER_STATE_VERSION);
    if (st->seed != l->o.seed || st->nsrc != (uint64_t)l->nsrc)
        return zy_fail("data loader state is for seed %llu with %llu sources; this loader has seed "
                       "%llu with %d",
                       (unsigned long long)st->seed, (unsigned long long)st->nsrc,
                       (unsigned long long)l->o.seed, l->nsrc);
    l->st = *st;
    return ZY_OK;
}

uint64_t loader_windows(const zy_loader *l, int s) {
    return l->src[s].first[l->src[s].nshards];
}

uint32_t loader_vocab_size(const zy_loader *l) {
    return l->vocab;
}

uint32_t loader_eos_id(const zy_loader *l) {
    return l->eos;
}

uint64_t loader_tokenizer_hash(const zy_loader *l, const char **from) {
    if (from) *from = l->tok_hash_from;
    return l->tok_hash;
}

int32_t loader_max_token(const zy_loader *l) {
    int32_t best = -1, buf[4096];
    for (int s = 0; s < l->nsrc; s++)
        for (int k = 0; k < l->src[s].nshards; k++) {
            const zy_shard *sh = &l->src[s].shards[k];
            for (uint64_t i = 0; i < sh->h.ntokens; i += 4096) {
                uint64_t n = sh->h.ntokens - i < 4096 ? sh->h.ntokens - i : 4096;
                shard_read(sh, i, n, buf);
                for (uint64_t j = 0; j < n; j++) best = buf[j] > best ? buf[j] : best;
            }
        }
    return best;
}
