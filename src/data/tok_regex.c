/* Patterns of tokenizer.json (Split, Replace): HF compiles them with Oniguruma; zayac rewrites them
 * for PCRE2 so that they match the same (see tok_internal.h), and iterates matches the way
 * Oniguruma's find_iter does. Literal patterns are searched as bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/err.h"
#include "data/tok_internal.h"

#include <ctype.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void puts_(tok_sbuf *b, const char *s) {
    tok_sbuf_add(b, s, strlen(s));
}

/* A class (its inside), bracketed outside a class, or merged into the enclosing one. */
static void put_class(tok_sbuf *b, const char *inside, int in_class, int negate) {
    if (!in_class) puts_(b, negate ? "[^" : "[");
    puts_(b, inside);
    if (!in_class) puts_(b, "]");
}

static int unsupported(tok_sbuf *b, const char *pat, const char *what) {
    free(b->s);
    b->s = NULL;
    return zy_fail("pattern \"%.80s\" uses %s, which zayac cannot match as HF's regex engine "
                   "(Oniguruma) does",
                   pat, what);
}

/* \p{..} / \pX / \P{..} at pat[i] (pointing at 'p' or 'P'); returns the characters consumed
 * after the backslash, 0 when malformed. */
static size_t property(const char *pat, size_t i, char *name, size_t cap, int *negate) {
    *negate = pat[i] == 'P';
    if (pat[i + 1] != '{') {
        if (!pat[i + 1]) return 0;
        name[0] = pat[i + 1], name[1] = 0;
        return 2;
    }
    const char *close = strchr(pat + i + 2, '}');
    if (!close) return 0;
    const char *s = pat + i + 2;
    if (*s == '^') *negate = !*negate, s++;
    size_t n = (size_t)(close - s);
    if (n + 1 > cap) return 0;
    memcpy(name, s, n);
    name[n] = 0;
    return (size_t)(close - (pat + i)) + 1;
}

int tok_regex_translate(const char *pat, char **out) {
    tok_sbuf b = {0};
    tok_sbuf_add(&b, "", 0);
    int in_class = 0;
    size_t class_open = 0; /* where the inside of the current class starts */
    for (size_t i = 0; pat[i];) {
        char c = pat[i];
        if (c == '\\') {
            char n = pat[i + 1];
            if (!n) return unsupported(&b, pat, "a trailing backslash");
            if (n == 'p' || n == 'P') {
                char name[64];
                int neg;
                size_t k = property(pat, i + 1, name, sizeof name, &neg);
                if (!k) return unsupported(&b, pat, "a malformed \\p{...}");
                const char *cls = NULL;
                if (!strcmp(name, "L") || !strcmp(name, "Letter")) cls = pretok_letter_class();
                if (!strcmp(name, "N") || !strcmp(name, "Number")) cls = pretok_number_class();
                if (cls && !(in_class && neg))
                    put_class(&b, cls, in_class, neg);
                else /* another property, or a negated one inside a class: PCRE2's own tables */
                    tok_sbuf_add(&b, pat + i, k + 1);
                i += k + 1;
                continue;
            }
            if (n == 's')
                put_class(&b, PRETOK_SPACE_CLASS, in_class, 0);
            else if (n == 'S' && !in_class)
                put_class(&b, PRETOK_SPACE_CLASS, 0, 1);
            else if (n == 'h')
                put_class(&b, "0-9a-fA-F", in_class, 0);
            else if (n == 'H' && !in_class)
                put_class(&b, "0-9a-fA-F", 0, 1);
            else if (n == 'H')
                return unsupported(&b, pat, "\\H inside a class");
            else if (strchr("wWbB", n)) {
                char what[8] = {'\\', n, 0};
                return unsupported(&b, pat, what);
            } else if (n == 'u' && isxdigit((unsigned char)pat[i + 2]) &&
                       isxdigit((unsigned char)pat[i + 3]) && isxdigit((unsigned char)pat[i + 4]) &&
                       isxdigit((unsigned char)pat[i + 5])) {
                puts_(&b, "\\x{");
                tok_sbuf_add(&b, pat + i + 2, 4);
                puts_(&b, "}");
                i += 6;
                continue;
            } else if (strchr("xoN", n) && pat[i + 2] == '{' && strchr(pat + i, '}')) {
                size_t k = (size_t)(strchr(pat + i, '}') - (pat + i)) + 1; /* \x{..} whole */
                tok_sbuf_add(&b, pat + i, k);
                i += k;
                continue;
            } else {
                tok_sbuf_add(&b, pat + i,
                             2); /* \S inside a class, \d, \r, \n, \x.., escaped symbols */
            }
            i += 2;
            continue;
        }
        if (in_class) {
            if (c == '[' && pat[i + 1] == ':') { /* a POSIX class: copied whole */
                const char *close = strstr(pat + i, ":]");
                if (!close) return unsupported(&b, pat, "an unterminated [:class:]");
                tok_sbuf_add(&b, pat + i, (size_t)(close - (pat + i)) + 2);
                i = (size_t)(close - pat) + 2;
                continue;
            }
            if (c == '[') return unsupported(&b, pat, "a class inside a class");
            if (c == '&' && pat[i + 1] == '&') return unsupported(&b, pat, "class intersection &&");
            if (c == ']' && b.n > class_open) in_class = 0;
            tok_sbuf_add(&b, &c, 1);
            i++;
            continue;
        }
        if (c == '[') {
            in_class = 1;
            tok_sbuf_add(&b, "[", 1);
            i++;
            if (pat[i] == '^') tok_sbuf_add(&b, "^", 1), i++;
            class_open = b.n; /* a ']' right here is a literal */
            continue;
        }
        if (c == '(' && pat[i + 1] == '?') { /* inline options: Oniguruma's m is PCRE2's s */
            size_t j = i + 2;
            while (pat[j] && strchr("imx-", pat[j])) j++;
            if (j > i + 2 && (pat[j] == ':' || pat[j] == ')')) {
                tok_sbuf_add(&b, "(?", 2);
                for (size_t k = i + 2; k < j; k++)
                    tok_sbuf_add(&b, pat[k] == 'm' ? "s" : pat + k, 1);
                i = j;
                continue;
            }
        }
        if (c == '{' && (isdigit((unsigned char)pat[i + 1]) || pat[i + 1] == ',')) {
            /* an interval: {,m} is {0,m}; a '+' after one is not possessive in Oniguruma but
             * repeats it: (x{n,m})+, which is x{n,} when n < m */
            char *end;
            long lo = pat[i + 1] == ',' ? 0 : strtol(pat + i + 1, &end, 10);
            const char *q = pat[i + 1] == ',' ? pat + i + 1 : end;
            const char *close = strchr(q, '}');
            if (close && (*q == '}' || *q == ',')) {
                long hi = *q == '}' ? lo : (q[1] == '}' ? -1 : strtol(q + 1, &end, 10));
                if (close[1] == '+') {
                    if (hi >= 0 && hi <= lo && lo > 1)
                        return unsupported(&b, pat, "an exact interval followed by '+'");
                    char r[48];
                    snprintf(r, sizeof r, "{%ld,}", lo);
                    puts_(&b, r);
                    i = (size_t)(close - pat) + 2;
                    continue;
                }
                if (pat[i + 1] == ',') {
                    tok_sbuf_add(&b, "{0", 2);
                    i++;
                    continue;
                }
            }
        }
        tok_sbuf_add(&b, &c, 1);
        i++;
    }
    if (in_class) return unsupported(&b, pat, "an unterminated class");
    *out = b.s;
    return ZY_OK;
}

int tok_pattern_init(tok_pattern *p, const char *text, size_t len, int is_regex,
                     const char *where) {
    memset(p, 0, sizeof *p);
    if (len == 0) return zy_fail("%s: an empty pattern is not supported", where);
    if (!is_regex) {
        p->lit = zy_malloc(len + 1);
        memcpy(p->lit, text, len);
        p->lit[len] = 0;
        p->lit_len = len;
        return ZY_OK;
    }
    if (memchr(text, 0, len)) return zy_fail("%s: the pattern holds a NUL character", where);
    char *pcre;
    if (tok_regex_translate(text, &pcre) != ZY_OK) return zy_fail_ctx("%s", where);
    int rc = pretok_init(&p->re, pcre);
    free(pcre);
    return rc == ZY_OK ? ZY_OK : zy_fail_ctx("%s", where);
}

void tok_pattern_free(tok_pattern *p) {
    free(p->lit);
    if (p->re.code) pretok_free(&p->re);
    memset(p, 0, sizeof *p);
}

/* Length of the character at s (1 for a byte that starts no valid UTF-8 character). */
static size_t char_len(const char *s, size_t n) {
    uint32_t cp;
    int l = utf8_decode((const uint8_t *)s, n, &cp);
    return l ? (size_t)l : 1;
}

int tok_pattern_next(const tok_pattern *p, zy_pretok_matcher *m, const char *text, size_t len,
                     tok_find *it, size_t *s, size_t *e) {
    for (;;) {
        if (it->pos > len) return 0;
        if (p->lit) {
            const char *f = memmem(text + it->pos, len - it->pos, p->lit, p->lit_len);
            if (!f) {
                it->pos = len + 1;
                return 0;
            }
            *s = (size_t)(f - text);
            *e = it->pos = *s + p->lit_len;
            return 1;
        }
        pcre2_match_data *md = (pcre2_match_data *)m->md;
        int rc = pcre2_match((pcre2_code *)p->re.code, (PCRE2_SPTR)text, len, it->pos, 0, md,
                             (pcre2_match_context *)m->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->pos = len + 1;
            return 0;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return zy_fail("pattern match failed at byte %zu: %s", it->pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[0] == ov[1] && it->has_last && it->last_end == ov[1]) {
            it->pos += it->pos < len ? char_len(text + it->pos, len - it->pos) : 1;
            continue;
        }
        *s = ov[0];
        *e = it->pos = it->last_end = ov[1];
        it->has_last = 1;
        return 1;
    }
}
