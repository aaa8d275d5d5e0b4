/* Byte-level pre-tokenization with PCRE2 (see pretok.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretok.h"
#include "base/err.h"
#include "data/tok_internal.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PCRE2_MAJOR < 10 || (PCRE2_MAJOR == 10 && PCRE2_MINOR < 34)
#error "zayac needs PCRE2 10.34 or newer (matching on invalid UTF-8)"
#endif

static void sb_cp(tok_sbuf *b, uint32_t c) { /* UTF-8 of one code point */
    char u[4];
    size_t n;
    if (c < 0x80)
        u[0] = (char)c, n = 1;
    else if (c < 0x800)
        u[0] = (char)(0xC0 | c >> 6), u[1] = (char)(0x80 | (c & 0x3F)), n = 2;
    else if (c < 0x10000)
        u[0] = (char)(0xE0 | c >> 12), u[1] = (char)(0x80 | ((c >> 6) & 0x3F)),
        u[2] = (char)(0x80 | (c & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | c >> 18), u[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((c >> 6) & 0x3F)), u[3] = (char)(0x80 | (c & 0x3F)), n = 4;
    tok_sbuf_add(b, u, n);
}

static void sb_range(tok_sbuf *b, uint32_t lo, uint32_t hi) {
    char r[40];
    int n = lo == hi ? snprintf(r, sizeof r, "\\x{%X}", lo)
                     : snprintf(r, sizeof r, "\\x{%X}-\\x{%X}", lo, hi);
    tok_sbuf_add(b, r, (size_t)n);
}

/* Appends to cls, as ranges, the code points of text that `prop` (a PCRE2 pattern of one
 * character) matches; returns how many. */
static size_t collect_matches(const char *prop, const tok_sbuf *text, tok_sbuf *cls) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)prop, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &err, &off, NULL);
    ZY_CHECK(re);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    size_t pos = 0, count = 0;
    uint32_t lo = 0, hi = 0;
    int open = 0;
    /* the text is valid UTF-8: checking it again on every call would be quadratic */
    while (pcre2_match(re, (PCRE2_SPTR)text->s, text->n, pos, PCRE2_NO_UTF_CHECK, md, NULL) > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        uint32_t c;
        ZY_CHECK(utf8_decode((const uint8_t *)text->s + ov[0], ov[1] - ov[0], &c) > 0);
        if (open && c == hi + 1) {
            hi = c;
        } else {
            if (open) sb_range(cls, lo, hi);
            lo = hi = c;
            open = 1;
        }
        count++;
        pos = ov[1];
    }
    if (open) sb_range(cls, lo, hi);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return count;
}

/* The inside of a character class for HF's set rs [n]: PCRE2's base class plus what it lacks; or,
 * if the base holds a code point HF's set does not, the full list of ranges. */
static void class_body(tok_sbuf *out, const char *base, const uint32_t (*rs)[2], int n) {
    tok_sbuf in = {0}, outside = {0}, extra = {0}, excess = {0};
    uint32_t next = 0;
    for (int i = 0; i < n; i++) {
        for (uint32_t c = next; c < rs[i][0]; c++)
            if (c < 0xD800 || c > 0xDFFF) sb_cp(&outside, c);
        for (uint32_t c = rs[i][0]; c <= rs[i][1]; c++) sb_cp(&in, c);
        next = rs[i][1] + 1;
    }
    for (uint32_t c = next; c < 0x110000; c++)
        if (c < 0xD800 || c > 0xDFFF) sb_cp(&outside, c);
    char neg[128], pos[128];
    snprintf(neg, sizeof neg, "[^%s]", base);
    snprintf(pos, sizeof pos, "[%s]", base);
    collect_matches(neg, &in, &extra);
    if (collect_matches(pos, &outside, &excess) == 0) {
        tok_sbuf_add(out, base, strlen(base));
        if (extra.n) tok_sbuf_add(out, extra.s, extra.n);
    } else {
        for (int i = 0; i < n; i++) sb_range(out, rs[i][0], rs[i][1]);
    }
    free(in.s);
    free(outside.s);
    free(extra.s);
    free(excess.s);
}

static char *gpt2_pattern, *word_pattern, *letter_class, *number_class;
static pthread_once_t gpt2_once = PTHREAD_ONCE_INIT, word_once = PTHREAD_ONCE_INIT,
                      class_once = PTHREAD_ONCE_INIT;

static void build_classes(void) {
    tok_sbuf L = {0}, N = {0};
    class_body(&L, "\\p{L}", zy_gpt2_letters, zy_gpt2_n_letters);
    class_body(&N, "\\p{N}", zy_gpt2_digits, zy_gpt2_n_digits);
    letter_class = L.s;
    number_class = N.s;
}

const char *pretok_letter_class(void) {
    pthread_once(&class_once, build_classes);
    return letter_class;
}

const char *pretok_number_class(void) {
    pthread_once(&class_once, build_classes);
    return number_class;
}

static void build_gpt2_pattern(void) {
    /* written as HF has it; the translation gives \p{L}, \p{N} and \s HF's meaning */
    static const char hf[] =
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    ZY_CHECK(tok_regex_translate(hf, &gpt2_pattern) == ZY_OK);
}

const char *pretok_gpt2_pattern(void) {
    pthread_once(&gpt2_once, build_gpt2_pattern);
    return gpt2_pattern;
}

static void build_word_pattern(void) {
    tok_sbuf w = {0}, p = {0};
    /* Rust's \\w is Alphabetic + marks + Nd + Pc + joiners; the table adds the rest of Alphabetic
     */
    class_body(&w, "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}", zy_gpt2_word,
               zy_gpt2_n_word);
    tok_sbuf_add(&p, "^[", 2);
    tok_sbuf_add(&p, w.s, w.n);
    tok_sbuf_add(&p, "]", 1);
    free(w.s);
    word_pattern = p.s;
}

const char *pretok_word_pattern(void) {
    pthread_once(&word_once, build_word_pattern);
    return word_pattern;
}

int pretok_init(zy_pretok *p, const char *pattern) {
    p->code = NULL;
    if (!pattern) pattern = pretok_gpt2_pattern();
    int err;
    PCRE2_SIZE off;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    ZY_CHECK(cc);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_code *code = pcre2_compile(
        (PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
        PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE, &err, &off, cc);
    pcre2_compile_context_free(cc);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return zy_fail("split pattern: %s at offset %zu", (const char *)msg, (size_t)off);
    }
    /* JIT is an optimisation: the interpreter gives the same matches if it is unavailable */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    p->code = code;
    return ZY_OK;
}

void pretok_free(zy_pretok *p) {
    pcre2_code_free((pcre2_code *)p->code);
    p->code = NULL;
}

void pretok_matcher_init(zy_pretok_matcher *m) {
    /* group 0 is all we read: a pattern with more groups fills what fits (rc 0) */
    m->md = pcre2_match_data_create(1, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    /* long runs of one character class backtrack through the lookahead: give JIT room */
    m->stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    ZY_CHECK(m->md && m->mctx && m->stack);
    pcre2_jit_stack_assign((pcre2_match_context *)m->mctx, NULL, m->stack);
}

void pretok_matcher_free(zy_pretok_matcher *m) {
    pcre2_match_data_free((pcre2_match_data *)m->md);
    pcre2_match_context_free((pcre2_match_context *)m->mctx);
    pcre2_jit_stack_free((pcre2_jit_stack *)m->stack);
    memset(m, 0, sizeof *m);
}

int pretok_split(const zy_pretok *p, zy_pretok_matcher *m, const char *text, size_t len,
                 pretok_piece_fn fn, void *ctx) {
    pcre2_code *code = (pcre2_code *)p->code;
    pcre2_match_data *md = (pcre2_match_data *)m->md;
    size_t pos = 0, done = 0; /* done: end of the last piece handed out */
    while (pos < len) {
        int rc =
            pcre2_match(code, (PCRE2_SPTR)text, len, pos, 0, md, (pcre2_match_context *)m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) { /* 0: groups beyond the ovector, group 0 is set */
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return zy_fail("pre-tokenizer: PCRE2 match failed at byte %zu: %s", pos,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e == s) { /* an empty match (only a custom pattern can make one): step over */
            pos = s + 1;
            continue;
        }
        if (s > done && fn(text + done, s - done, ctx)) return ZY_ERR;
        if (fn(text + s, e - s, ctx)) return ZY_ERR;
        done = pos = e;
    }
    if (done < len && fn(text + done, len - done, ctx)) return ZY_ERR;
    return ZY_OK;
}

/* ---- the GPT-2 byte table ---- */

static int is_kept_byte(int b) { /* bytes that stand for themselves */
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t bytelevel_char(uint8_t b) {
    if (is_kept_byte(b)) return b;
    uint32_t n = 0; /* the others take 256, 257, ... in byte order */
    for (int i = 0; i < b; i++) n += !is_kept_byte(i);
    return 256 + n;
}

int bytelevel_byte(uint32_t cp) {
    if (cp < 256) return is_kept_byte((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1; /* 68 bytes are remapped */
    uint32_t n = cp - 256;
    for (int i = 0; i < 256; i++)
        if (!is_kept_byte(i) && n-- == 0) return i;
    return -1;
}

static const char *byte_utf8_table(void) {
    /* [256][3]: the UTF-8 of each byte's character (1 or 2 bytes) then its length */
    static char tab[256][3];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        char t[256][3];
        for (int b = 0; b < 256; b++) {
            uint32_t cp = bytelevel_char((uint8_t)b);
            if (cp < 0x80) {
                t[b][0] = (char)cp;
                t[b][2] = 1;
            } else {
                t[b][0] = (char)(0xC0 | (cp >> 6));
                t[b][1] = (char)(0x80 | (cp & 0x3F));
                t[b][2] = 2;
            }
        }
        memcpy(tab, t, sizeof t); /* idempotent, so a race only repeats the same writes */
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return &tab[0][0];
}

size_t bytelevel_encode(const uint8_t *bytes, size_t n, char *out) {
    const char *tab = byte_utf8_table();
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = tab + 3 * bytes[i];
        out[k++] = e[0];
        if (e[2] == 2) out[k++] = e[1];
    }
    out[k] = 0;
    return k;
}

int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0)
        len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        len = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t bytelevel_decode(const char *s, size_t len, uint8_t *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = utf8_decode(u + i, len - i, &cp);
        int b = l ? bytelevel_byte(cp) : -1;
        if (b < 0) { /* not a byte-level string: its own bytes */
            memcpy(out, s, len);
            return len;
        }
        out[k++] = (uint8_t)b;
        i += (size_t)l;
    }
    return k;
}
