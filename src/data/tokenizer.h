/* BPE tokenizers compatible with Hugging Face `tokenizers`: reads tokenizer.json files as real
 * checkpoints ship them and encodes with the same ids as HF; trains byte-level BPE from text
 * (bpe_train.c) and writes it as HF does.
 *
 * What a tokenizer.json may hold (anything else is an error naming the component):
 *   model        BPE: vocab, merges ("a b" or ["a", "b"]), unk_token, fuse_unk, byte_fallback
 *                ("<0xXX>" tokens), ignore_merges
 *   normalizer   Replace (String or Regex), Prepend, Sequence
 *   pre_tokenizer ByteLevel (GPT-2 split, prefix space), Split (String or Regex, every
 *                behaviour, invert), Metaspace (prepend_scheme, split), Sequence
 *   decoder      ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence
 *   added_tokens special, single_word, lstrip, rstrip, normalized
 * Regex patterns are written for Oniguruma (HF's engine); zayac rewrites them for PCRE2 with HF's
 * Unicode letters, numbers and white space (tok_regex.c). Decoding keeps bytes that are not valid
 * UTF-8 where HF would print U+FFFD, so any bytes round-trip.
 *
 * Special tokens: zayac's trainer writes "<|bos|>", "<|eos|>", "<|pad|>" (ids 0, 1, 2) unless told
 * otherwise. A loaded file's ids are found by name: eos is the first present of "<|eos|>",
 * "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"; bos of "<|bos|>", "<|startoftext|>",
 * "<|begin_of_text|>", "<s>", "<bos>", else eos; pad of "<|pad|>", "<pad>", else eos. -1 if none.
 *
 * Encoding never adds bos/eos itself (HF's post-processor is not applied: the data pipeline places
 * eos between documents). Plain encoding treats special-token text as ordinary text (as HF does
 * with encode_special_tokens = True: non-special added tokens are still matched); the TOK_SPECIAL
 * flag matches special tokens in the text too, as HF's default encode() does. */
#ifndef ZY_TOKENIZER_H
#define ZY_TOKENIZER_H

#include "data/docs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zy_tokenizer zy_tokenizer;
typedef struct tok_encoder tok_encoder;

/* A growable array of token ids. */
typedef struct {
    int32_t *data; /* [n] */
    size_t n, cap;
} zy_ids;

void ids_push(zy_ids *v, int32_t id);
/* Makes room for n more ids. */
void ids_reserve(zy_ids *v, size_t n);
void ids_free(zy_ids *v);

/* Flags for encode/decode. */
enum {
    TOK_SPECIAL = 1,      /* encode: match special tokens in the text (as HF's encode does) */
    TOK_SKIP_SPECIAL = 2, /* decode: leave special tokens out */
};

/* The default special tokens of a trained tokenizer, in id order (bos, eos, pad). */
extern const char *const TOK_DEFAULT_SPECIALS[3];

/* Loads a tokenizer.json; a file of another kind (WordPiece, Unigram, a component zayac does not
 * implement), malformed JSON or missing fields is one error naming the file. */
int tok_load(zy_tokenizer **out, const char *path);
/* Writes tokenizer.json (HF format, loads in `tokenizers`) atomically: a loaded file as it was
 * read, a trained one as HF writes byte-level BPE. */
int tok_save(const zy_tokenizer *t, const char *path);
/* Writes an HF tokenizer_config.json naming the bos/eos/pad tokens (for transformers), with
 * model_max_length when it is > 0 (transformers warns and truncates by it). */
int tok_save_hf_config(const zy_tokenizer *t, const char *path, int model_max_length);
void tok_free(zy_tokenizer *t);

/* Number of ids (1 + the largest id of the vocabulary and the added tokens). */
int32_t tok_vocab_size(const zy_tokenizer *t);
/* Number of merges. */
int32_t tok_n_merges(const zy_tokenizer *t);
int32_t tok_bos_id(const zy_tokenizer *t);
int32_t tok_eos_id(const zy_tokenizer *t);
int32_t tok_pad_id(const zy_tokenizer *t);
/* The id of a token string as written in tokenizer.json (added tokens first), or -1. */
int32_t tok_token_id(const zy_tokenizer *t, const char *text);
/* The string of an id as written in tokenizer.json ("Ġthe"), or NULL for an unused id. */
const char *tok_token_text(const zy_tokenizer *t, int32_t id);
/* 1 if id is a special added token. */
int tok_is_special(const zy_tokenizer *t, int32_t id);
/* One line naming the tokenizer's components ("normalizer Replace; pre-tokenizer Split,
 * ByteLevel; ..."), into buf. */
void tok_describe(const zy_tokenizer *t, char *buf, size_t cap);

/* Per-thread encoding state (a word cache and scratch); use one per thread. */
tok_encoder *tok_encoder_new(const zy_tokenizer *t);
void tok_encoder_free(tok_encoder *e);
/* Encodes len bytes of text (any bytes; invalid UTF-8 round-trips) and appends ids to out. */
int tok_encoder_encode(tok_encoder *e, const char *text, size_t len, int flags, zy_ids *out);

/* Hands each piece the pre-tokenizers make of a text to fn (as strings, byte-level ones
 * for ByteLevel), without BPE; added tokens are cut out as encoding does and not shown. */
int tok_pieces(const zy_tokenizer *t, const char *text, size_t len, int flags,
               int (*fn)(const char *piece, size_t len, void *ctx), void *ctx);

/* Encodes with a temporary encoder; long plain texts of a GPT-2-style tokenizer are cut at line
 * starts (where its split pattern always breaks) and encoded in parallel with OpenMP. Appends ids
 * to out. */
int tok_encode(const zy_tokenizer *t, const char *text, size_t len, int flags, zy_ids *out);
/* Decodes n ids through the tokenizer's decoders to bytes: *out is a NUL-terminated heap buffer
 * of *out_len bytes. An id outside the vocabulary is an error. */
int tok_decode(const zy_tokenizer *t, const int32_t *ids, size_t n, int flags, char **out,
               size_t *out_len);

/* ---- training (bpe_train.c) ---- */

typedef struct zy_bpe_trainer zy_bpe_trainer;

/* A trainer that counts pre-tokenized words of the texts it is given. */
zy_bpe_trainer *bpe_trainer_new(void);
void bpe_trainer_free(zy_bpe_trainer *tr);
/* Pre-tokenizes one text (a document) and counts its words. */
int bpe_trainer_add(zy_bpe_trainer *tr, const char *text, size_t len);
/* Learns merges until vocab_size ids (specials + 256 bytes + merges) or until no pair occurs
 * min_frequency times; specials (NULL: TOK_DEFAULT_SPECIALS) take the first ids. */
int bpe_trainer_finish(zy_bpe_trainer *tr, int32_t vocab_size, const char *const *specials,
                       int n_specials, int min_frequency, zy_tokenizer **out);
/* Trains on text files (each cut into documents by sep; separator lines are not trained on).
 * *bytes_read (may be NULL) gets the size of the text. */
int tok_train_files(const char *const *paths, int n_paths, zy_docsep sep, int32_t vocab_size,
                    const char *const *specials, int n_specials, int min_frequency,
                    zy_tokenizer **out, size_t *bytes_read);

#endif
