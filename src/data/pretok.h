/* Byte-level pre-tokenization, as Hugging Face's ByteLevel pre-tokenizer does it: the GPT-2 split
 * pattern (compiled once with PCRE2 and JIT) cuts text into pieces, and the GPT-2 byte<->unicode
 * table maps each byte to a printable character for token strings in tokenizer.json.
 * Owns the compiled pattern (zy_pretok, shared read-only) and per-thread match state. */
#ifndef ZY_PRETOK_H
#define ZY_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* The GPT-2 pattern as HF runs it (with Oniguruma), written for PCRE2, built once per process:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * \s is spelled out as Unicode White_Space (what Oniguruma's \s means; PCRE2's would add U+180E),
 * and \p{L} / \p{N} get the code points HF treats as letters / digits that this PCRE2's Unicode
 * tables lack (unicode_gpt2.c, measured from HF). */
const char *pretok_gpt2_pattern(void);

/* "^[...]": a word character as HF's single_word rule for added tokens sees it (Rust's \\w). */
const char *pretok_word_pattern(void);

/* HF's letters, digits and word characters for the patterns, as inclusive code point ranges
 * (unicode_gpt2.c). */
extern const uint32_t zy_gpt2_letters[][2];
extern const int zy_gpt2_n_letters;
extern const uint32_t zy_gpt2_digits[][2];
extern const int zy_gpt2_n_digits;
extern const uint32_t zy_gpt2_word[][2];
extern const int zy_gpt2_n_word;

typedef struct {
    void *code; /* pcre2_code_8 * */
} zy_pretok;

typedef struct {
    void *md;    /* pcre2_match_data_8 * */
    void *mctx;  /* pcre2_match_context_8 * */
    void *stack; /* pcre2_jit_stack_8 * */
} zy_pretok_matcher;

/* Compiles a split pattern (NULL: the GPT-2 pattern) with UTF, UCP and invalid-UTF-8 matching. */
int pretok_init(zy_pretok *p, const char *pattern);
void pretok_free(zy_pretok *p);
/* Per-thread match state for a compiled pattern. */
void pretok_matcher_init(zy_pretok_matcher *m, const zy_pretok *p);
void pretok_matcher_free(zy_pretok_matcher *m);

/* Called for each piece, in order; returns 0 to go on, nonzero to stop with an error. */
typedef int (*pretok_piece_fn)(const char *piece, size_t len, void *ctx);
/* Splits text into pieces (matches and the gaps between them, as HF's "Isolated" split does;
 * gaps only occur around invalid UTF-8). Returns ZY_ERR on a PCRE2 failure or a callback error. */
int pretok_split(const zy_pretok *p, zy_pretok_matcher *m, const char *text, size_t len,
                 pretok_piece_fn fn, void *ctx);

/* The printable code point GPT-2's table maps byte b to. */
uint32_t bytelevel_char(uint8_t b);
/* The byte a code point stands for, or -1 when it is not one of the 256 table characters. */
int bytelevel_byte(uint32_t cp);
/* Writes the byte-level string of n bytes (2 bytes of UTF-8 at most per byte) into out, which
 * must hold 2*n + 1 bytes; returns its length (NUL-terminated). */
size_t bytelevel_encode(const uint8_t *bytes, size_t n, char *out);
/* Maps a token string back to bytes as HF's ByteLevel decoder does: when every character is a
 * table character, the bytes they stand for; otherwise the string's own UTF-8 bytes. out must
 * hold len bytes; returns the byte count. */
size_t bytelevel_decode(const char *s, size_t len, uint8_t *out);
/* Decodes one UTF-8 character at s (n bytes left) into *cp; returns its length, 0 if invalid. */
int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

#endif
