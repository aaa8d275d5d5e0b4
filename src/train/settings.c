/* The machinery of the settings table (settings.h): reading, overriding, defaults, printing. */
#include "train/settings.h"
#include "base/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const zy_setting *settings_find(const char *key) {
    for (int i = 0; i < zy_settings_count; i++)
        if (!strcmp(zy_settings[i].key, key)) return &zy_settings[i];
    return NULL;
}

/* 1 when some key lies under "prefix." (a group such as "optimizer"). */
static int is_group(const char *prefix) {
    const size_t n = strlen(prefix);
    for (int i = 0; i < zy_settings_count; i++)
        if (!strncmp(zy_settings[i].key, prefix, n) && zy_settings[i].key[n] == '.') return 1;
    return 0;
}

static const char *leaf(const char *key) {
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

/* Levenshtein distance (insertions, deletions, substitutions), both strings < 128 bytes used. */
static int edit_distance(const char *a, const char *b) {
    int na = (int)strnlen(a, 127), nb = (int)strnlen(b, 127), row[128];
    for (int j = 0; j <= nb; j++) row[j] = j;
    for (int i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

const char *settings_suggest(const char *key) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < zy_settings_count; i++) {
        const char *k = zy_settings[i].key;
        int d = edit_distance(key, k);
        /* a key put in the wrong group ("warmup" for schedule.warmup) */
        int d_leaf = edit_distance(leaf(key), leaf(k)) + 1;
        if (d_leaf < d) d = d_leaf;
        if (d < best_d) best_d = d, best = k;
    }
    const int n = (int)strlen(key);
    return best && (best_d <= 2 || 3 * best_d <= n) ? best : NULL;
}

/* Keys that were replaced, with what replaces them (an old config gets told, not just refused). */
static const char *const renamed_keys[][2] = {
    {"dist.replicate_embedding",
     "dist.embedding_update (\"replicated\" for true, \"owner\" for false; the default is "
     "\"split\")"},
};

static int unknown_key(const char *source, const char *key) {
    for (size_t i = 0; i < sizeof renamed_keys / sizeof renamed_keys[0]; i++)
        if (!strcmp(key, renamed_keys[i][0]))
            return zy_fail("%s: %s was replaced by %s", source, key, renamed_keys[i][1]);
    const char *s = settings_suggest(key);
    if (s) return zy_fail("%s: unknown key %s (did you mean %s?)", source, key, s);
    return zy_fail("%s: unknown key %s (zayac train --list-settings lists the keys)", source, key);
}

/* A short JSON text of v for error messages. */
static void json_text(const cJSON *v, char *out, size_t n) {
    char *t = cJSON_PrintUnformatted(v);
    snprintf(out, n, "%s", t ? t : "?");
    if (t && strlen(t) >= n && n > 4) strcpy(out + n - 4, "...");
    free(t);
}

/* The shortest "%g" text of x that reads back as x: as a double, or as a float when as_float
 * (a float field prints 0.0003, not the 0.000300000014 of its double value). */
typedef struct {
    char s[32];
} num_text;
static num_text fmt_as(double x, int as_float) {
    num_text t;
    if (x == floor(x) && fabs(x) < 1e9) { /* 10, not 1e+01 */
        snprintf(t.s, sizeof t.s, "%.0f", x);
        return t;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(t.s, sizeof t.s, "%.*g", p, x);
        const double back = strtod(t.s, NULL);
        if (as_float ? (float)back == (float)x : back == x) break;
    }
    return t;
}
static num_text fmt(double x) {
    return fmt_as(x, 0);
}

int settings_number(const cJSON *v, const char *source, const char *label, double lo, double hi,
                    int integer, double *out) {
    char found[64];
    if (!cJSON_IsNumber(v)) {
        json_text(v, found, sizeof found);
        return zy_fail("%s: %s must be a number, found %s", source, label, found);
    }
    const double x = v->valuedouble;
    if (integer && x != floor(x))
        return zy_fail("%s: %s = %s must be an integer", source, label, fmt(x).s);
    if (!(x >= lo && x <= hi))
        return zy_fail("%s: %s = %s is outside [%s, %s]", source, label, fmt(x).s, fmt(lo).s,
                       fmt(hi).s);
    *out = x;
    return ZY_OK;
}

static void *field(zy_train_config *c, const zy_setting *s) {
    return (char *)c + s->offset;
}
static const void *cfield(const zy_train_config *c, const zy_setting *s) {
    return (const char *)c + s->offset;
}

/* The index of name in choices, or -1. */
static int choice_index(const zy_setting *s, const char *name) {
    for (int i = 0; s->choices[i]; i++)
        if (!strcmp(s->choices[i], name)) return i;
    return -1;
}

/* "a, b, c" */
static void choice_list(const zy_setting *s, char *out, size_t n) {
    out[0] = 0;
    for (int i = 0; s->choices[i]; i++)
        snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? ", " : "", s->choices[i]);
}

static int read_string(const zy_setting *s, const cJSON *v, const char *source, const char **out) {
    char found[64];
    if (s->type == ZY_SET_STR && cJSON_IsNull(v)) {
        *out = "";
        return ZY_OK;
    }
    if (!cJSON_IsString(v)) {
        json_text(v, found, sizeof found);
        return zy_fail("%s: %s must be a string, found %s", source, s->key, found);
    }
    *out = v->valuestring;
    return ZY_OK;
}

/* Reads one value into c by the entry's type. */
static int read_value(zy_train_config *c, const zy_setting *s, const cJSON *v, const char *source) {
    void *f = field(c, s);
    double x;
    const char *str = "";
    char found[64], list[128];
    switch (s->type) {
    case ZY_SET_INT:
    case ZY_SET_I64:
    case ZY_SET_U64:
    case ZY_SET_FLOAT:
        ZY_TRY(settings_number(v, source, s->key, s->lo, s->hi, s->type != ZY_SET_FLOAT, &x));
        if (s->type == ZY_SET_INT) *(int *)f = (int)x;
        if (s->type == ZY_SET_I64) *(int64_t *)f = (int64_t)x;
        if (s->type == ZY_SET_U64) *(uint64_t *)f = (uint64_t)x;
        if (s->type == ZY_SET_FLOAT) *(float *)f = (float)x;
        return ZY_OK;
    case ZY_SET_BOOL:
        if (cJSON_IsBool(v) ||
            (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))) {
            *(int *)f = cJSON_IsBool(v) ? cJSON_IsTrue(v) : (int)v->valuedouble;
            return ZY_OK;
        }
        json_text(v, found, sizeof found);
        return zy_fail("%s: %s must be true or false, found %s", source, s->key, found);
    case ZY_SET_STR:
    case ZY_SET_CHOICE:
    case ZY_SET_ENUM:
        ZY_TRY(read_string(s, v, source, &str));
        if (s->type == ZY_SET_ENUM || s->type == ZY_SET_CHOICE) {
            const int i = choice_index(s, str);
            choice_list(s, list, sizeof list);
            if (i < 0)
                return zy_fail("%s: %s = \"%s\" is not one of: %s", source, s->key, str, list);
            if (s->type == ZY_SET_ENUM) {
                *(int *)f = i;
                return ZY_OK;
            }
        }
        if (strlen(str) >= s->size)
            return zy_fail("%s: %s is longer than %zu bytes", source, s->key, s->size - 1);
        snprintf((char *)f, s->size, "%s", str);
        return ZY_OK;
    case ZY_SET_CUSTOM:
        return s->read(c, v, source);
    }
    ZY_CHECKF(0, "setting %s: unknown type %d", s->key, (int)s->type);
    return ZY_ERR;
}

void settings_defaults(zy_train_config *c) {
    for (int i = 0; i < zy_settings_count; i++) {
        cJSON *v = cJSON_Parse(zy_settings[i].def);
        const int rc = v ? read_value(c, &zy_settings[i], v, "the settings table") : ZY_ERR;
        cJSON_Delete(v);
        /* a default the table itself refuses is a programming error (test_settings checks) */
        ZY_CHECKF(rc == ZY_OK, "default of %s: %s", zy_settings[i].key, zy_errmsg());
    }
}

/* The value at a dotted key, or NULL; groups are known to be objects (check_keys ran). */
static const cJSON *lookup(const cJSON *root, const char *key) {
    char part[128];
    const cJSON *o = root;
    for (const char *p = key, *dot; o; p = dot + 1) {
        dot = strchr(p, '.');
        if (!dot) return cJSON_GetObjectItemCaseSensitive(o, p);
        snprintf(part, sizeof part, "%.*s", (int)(dot - p), p);
        o = cJSON_GetObjectItemCaseSensitive(o, part);
    }
    return NULL;
}

/* Every key of the object o (whose path is prefix) must be a table key or a group of them. */
static int check_keys(const cJSON *o, const char *prefix, const char *source) {
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        char key[256];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", it->string);
        if (settings_find(key)) continue;
        if (!is_group(key)) return unknown_key(source, key);
        if (!cJSON_IsObject(it))
            return zy_fail("%s: %s must be an object of %s.* keys", source, key, key);
        ZY_TRY(check_keys(it, key, source));
    }
    return ZY_OK;
}

int settings_read(zy_train_config *c, const cJSON *root, const char *source) {
    ZY_TRY(check_keys(root, "", source));
    for (int i = 0; i < zy_settings_count; i++) {
        const cJSON *v = lookup(root, zy_settings[i].key);
        if (v) ZY_TRY(read_value(c, &zy_settings[i], v, source));
    }
    return ZY_OK;
}

/* A JSON number exactly as JSON writes it (no hex, inf or nan, nothing after it). */
static cJSON *parse_number(const char *text) {
    if (!*text || strspn(text, "0123456789+-.eE") != strlen(text)) return NULL;
    char *end;
    double x = strtod(text, &end);
    return *end || !isfinite(x) ? NULL : cJSON_CreateNumber(x);
}

/* An override's value as a JSON item by the entry's type (NULL + error when malformed). */
static cJSON *parse_value(const zy_setting *s, const char *assignment, const char *text) {
    cJSON *v = NULL;
    switch (s->type) {
    case ZY_SET_INT:
    case ZY_SET_I64:
    case ZY_SET_U64:
    case ZY_SET_FLOAT:
        if (!(v = parse_number(text)))
            zy_fail("--set %s: %s must be a number, found '%s'", assignment, s->key, text);
        return v;
    case ZY_SET_BOOL:
        if (!strcmp(text, "true") || !strcmp(text, "1")) return cJSON_CreateTrue();
        if (!strcmp(text, "false") || !strcmp(text, "0")) return cJSON_CreateFalse();
        zy_fail("--set %s: %s must be true or false, found '%s'", assignment, s->key, text);
        return NULL;
    case ZY_SET_STR:
    case ZY_SET_CHOICE:
    case ZY_SET_ENUM:
        /* the text as it is, or a JSON string literal ("runs/x", as configs write it) */
        if (text[0] != '"') return cJSON_CreateString(text);
        v = cJSON_ParseWithOpts(text, NULL, 1);
        if (cJSON_IsString(v)) return v;
        cJSON_Delete(v);
        zy_fail("--set %s: %s starts with a quote but is not one JSON string (drop the quotes to "
                "give the text as it is)",
                assignment, s->key);
        return NULL;
    case ZY_SET_CUSTOM:
        /* JSON (an object, a list); else the text as a string (a name or a path) */
        v = cJSON_ParseWithOpts(text, NULL, 1);
        return v ? v : cJSON_CreateString(text);
    }
    return NULL;
}

/* Sets root[a][b]... = value for a dotted key, creating objects on the way (takes value). */
static int put(cJSON *root, const char *key, cJSON *value, const char *assignment) {
    char part[256];
    cJSON *o = root;
    const char *p = key, *dot;
    while ((dot = strchr(p, '.')) != NULL) {
        snprintf(part, sizeof part, "%.*s", (int)(dot - p), p);
        cJSON *next = cJSON_GetObjectItemCaseSensitive(o, part);
        if (!next) next = cJSON_AddObjectToObject(o, part);
        if (!cJSON_IsObject(next)) { /* "model": "tiny", then --set model.x=... */
            cJSON_Delete(value);
            return zy_fail("--set %s: %.*s is not an object in the config (give it as an inline "
                           "object to set its fields)",
                           assignment, (int)(dot - key), key);
        }
        o = next;
        p = dot + 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, p))
        cJSON_ReplaceItemInObjectCaseSensitive(o, p, value);
    else
        cJSON_AddItemToObject(o, p, value);
    return ZY_OK;
}

int settings_override(cJSON *root, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return zy_fail("--set '%s' is not of the form key=value", assignment);
    char key[256];
    if ((size_t)(eq - assignment) >= sizeof key)
        return zy_fail("--set: key of '%.40s...' is too long", assignment);
    snprintf(key, sizeof key, "%.*s", (int)(eq - assignment), assignment);
    const char *text = eq + 1;
    if (!strncmp(key, "model.", 6)) { /* a field of the inline HF config: its own format */
        cJSON *v = cJSON_ParseWithOpts(text, NULL, 1);
        return put(root, key, v ? v : cJSON_CreateString(text), assignment);
    }
    const zy_setting *s = settings_find(key);
    if (!s && is_group(key))
        return zy_fail("--set %s: %s is a group of settings; set its keys one by one (%s.*, "
                       "zayac train --list-settings)",
                       assignment, key, key);
    if (!s) {
        char source[300];
        snprintf(source, sizeof source, "--set %.280s", assignment);
        return unknown_key(source, key);
    }
    cJSON *v = parse_value(s, assignment, text);
    return v ? put(root, key, v, assignment) : ZY_ERR;
}

char *settings_string_override(const char *key, const char *value) {
    cJSON *s = cJSON_CreateString(value);
    char *json = cJSON_PrintUnformatted(s);
    cJSON_Delete(s);
    ZY_CHECK(json != NULL);
    char *out = zy_malloc(strlen(key) + strlen(json) + 2);
    sprintf(out, "%s=%s", key, json);
    free(json);
    return out;
}

/* c's value of one entry as a new JSON item. */
static cJSON *write_value(const zy_train_config *c, const zy_setting *s) {
    const void *f = cfield(c, s);
    char buf[32];
    switch (s->type) {
    case ZY_SET_INT:
        return cJSON_CreateNumber(*(const int *)f);
    case ZY_SET_I64:
        snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)f);
        return cJSON_CreateRaw(buf);
    case ZY_SET_U64:
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)f);
        return cJSON_CreateRaw(buf);
    case ZY_SET_FLOAT: /* the float's shortest text (cJSON would print the double's digits) */
        return cJSON_CreateRaw(fmt_as(*(const float *)f, 1).s);
    case ZY_SET_BOOL:
        return cJSON_CreateBool(*(const int *)f);
    case ZY_SET_STR:
    case ZY_SET_CHOICE:
        return cJSON_CreateString((const char *)f);
    case ZY_SET_ENUM:
        return cJSON_CreateString(s->choices[*(const int *)f]);
    case ZY_SET_CUSTOM:
        return s->write(c);
    }
    ZY_CHECKF(0, "setting %s: unknown type %d", s->key, (int)s->type);
    return NULL;
}

cJSON *settings_to_json(const zy_train_config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < zy_settings_count; i++) {
        const int rc = put(root, zy_settings[i].key, write_value(c, &zy_settings[i]), "");
        ZY_CHECK(rc == ZY_OK); /* the table's groups never collide with its keys */
    }
    return root;
}

static const char *type_name(const zy_setting *s) {
    static const char *const names[] = {"integer", "integer", "integer", "number",
                                        "bool",    "string",  "string",  "string"};
    return s->type == ZY_SET_CUSTOM ? s->type_name : names[s->type];
}

/* Appends to a growing heap string. */
static void append(char **buf, size_t *len, const char *text) {
    const size_t n = strlen(text);
    *buf = zy_realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, text, n + 1);
    *len += n;
}

char *settings_markdown(void) {
    zy_train_config *c = zy_calloc(1, sizeof *c);
    settings_defaults(c);
    char *md = NULL, line[1024], range[160];
    size_t len = 0;
    append(&md, &len, "| key | type | default | range | doc |\n|---|---|---|---|---|\n");
    for (int i = 0; i < zy_settings_count; i++) {
        const zy_setting *s = &zy_settings[i];
        cJSON *v = write_value(c, s);
        char *def = cJSON_PrintUnformatted(v);
        cJSON_Delete(v);
        range[0] = 0;
        if (s->type <= ZY_SET_FLOAT)
            snprintf(range, sizeof range, "%s to %s", fmt(s->lo).s, fmt(s->hi).s);
        else if (s->type == ZY_SET_BOOL)
            snprintf(range, sizeof range, "true, false");
        else if (s->choices)
            choice_list(s, range, sizeof range);
        snprintf(line, sizeof line, "| `%s` | %s | `%s` | %s | %s |\n", s->key, type_name(s), def,
                 range, s->doc);
        free(def);
        append(&md, &len, line);
    }
    free(c);
    return md;
}
