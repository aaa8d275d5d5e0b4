/* Shared by the tests that train through the CLI: a deterministic corpus of sentences from a small
 * vocabulary (documents separated by blank lines), so a tokenizer and shards can be made from it.
 */
#ifndef ZY_CORPUS_UTIL_H
#define ZY_CORPUS_UTIL_H

#include "base/rng.h"
#include "spawn_util.h"

#include <stdio.h>

/* Writes docs documents of 20-59 words drawn from the first nwords (<= 24) words of the list, with
 * the counter-based RNG seeded by seed. Returns 0, or -1 when the file cannot be written. */
static inline int corpus_write(const char *path, uint64_t seed, int docs, int nwords) {
    static const char *words[] = {"the",   "cat",   "sat",   "on",   "a",      "mat",
                                  "and",   "dog",   "ran",   "far",  "away",   "from",
                                  "home",  "while", "birds", "sang", "softly", "in",
                                  "trees", "near",  "river", "bank", "at",     "dawn"};
    const int nw = nwords < 24 ? nwords : 24;
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    zy_rng r = zy_rng_init(seed, 0);
    for (int doc = 0; doc < docs; doc++) {
        int n = 20 + (int)zy_rng_below(&r, 40);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s%s", words[zy_rng_below(&r, (uint64_t)nw)], i + 1 < n ? " " : ".\n\n");
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* `zayac tokenizer train` (vocab ids) on the corpus into tok, then `zayac data prepare` of the
 * corpus with it into the folder data (val_fraction held out), both run by bin in dir. Returns 0,
 * or -1 with the failing command's stderr printed. */
static inline int corpus_tokenize(const char *bin, const char *dir, const char *corpus,
                                  const char *vocab, const char *val_fraction, const char *tok,
                                  const char *data) {
    const char *const steps[2][12] = {
        {"tokenizer", "train", "--input", corpus, "--vocab-size", vocab, "--out", tok, NULL},
        {"data", "prepare", "--tokenizer", tok, "--input", corpus, "--out", data, "--val-fraction",
         val_fraction, NULL}};
    for (int i = 0; i < 2; i++) {
        run_result r = spawn_capture(bin, dir, steps[i]);
        const int code = r.code;
        if (code != 0)
            fprintf(stderr, "%s %s: exit %d\n%s\n", steps[i][0], steps[i][1], code, r.err);
        result_free(&r);
        if (code != 0) return -1;
    }
    return 0;
}

#endif
