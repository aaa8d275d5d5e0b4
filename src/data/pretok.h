/* Byte-level pre-tokenization, as Hugging Face's ByteLevel pre-tokenizer does it: the GPT-2 split
 * pattern (compiled once with PCRE2 and JIT) cuts text into pieces, and the GPT-2 byte<->unicode
 * table maps each byte to a printable character for token strings in tokenizer.json.
 * Owns the compiled pattern (zy_pretok, shared read-only) and per-thread match state. */
#ifndef ZY_PRETOK_H
#define ZY_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* HF's GPT-2 split pattern, as its tokenizer.json-free ByteLevel pre-tokenizer runs it with
 * Oniguruma:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * rewritten for PCRE2 by tok_regex_translate, built once per process. */
const char *pretok_gpt2_pattern(void);

/* The inside of a character class (no brackets) for what HF's regex engine calls a letter
 * (\p{L}) / a number (\p{N}): PCRE2's class plus the code points this PCRE2's Unicode tables
 * lack (unicode_gpt2.c, measured from HF). Built once per process. */
const char *pretok_letter_class(void);
const char *pretok_number_class(void);
/* Unicode White_Space as a class inside (what Oniguruma's \s means; PCRE2's would add U+180E). */
#define PRETOK_SPACE_CLASS                                                                         \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"       \
    "\\x{202F}\\x{205F}\\x{3000}"

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

/* Compiles a PCRE2 pattern (NULL: the GPT-2 pattern) with UTF, UCP, invalid-UTF-8 matching and
 * Oniguruma's line rules (^ and $ at every \n, . not matching \n). */
int pretok_init(zy_pretok *p, const char *pattern);
void pretok_free(zy_pretok *p);
/* Per-thread match state, good for any compiled pattern. */
void pretok_matcher_init(zy_pretok_matcher *m);
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
