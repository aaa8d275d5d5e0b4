/* Option parsing, value checks, usage and exit statuses for subcommands (see args.h). */
#include "args.h"
#include "base/err.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_help(const char *a) {
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* "-x" is an option; "-", "-3" and "-.5" are values or positional arguments. */
static int looks_like_option(const char *a) {
    if (!strcmp(a, "--")) return 0;
    return a[0] == '-' && a[1] && !isdigit((unsigned char)a[1]) && a[1] != '.';
}

int args_parse(int argc, char **argv, zy_opt *opts, const char **positional, int max_pos,
               int *npos) {
    int np = 0;
    if (npos) *npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) a = "--help";
        if (!looks_like_option(a)) {
            if (!positional || np >= max_pos) return zy_fail("unexpected argument '%s'", a);
            positional[np++] = a;
            if (npos) *npos = np;
            continue;
        }
        /* a short option (-n) is one a command lists by that name */
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        zy_opt *o = NULL;
        for (zy_opt *p = opts; p->name; p++)
            if (strlen(p->name) == len && strncmp(p->name, a, len) == 0) o = p;
        if (!o) return zy_fail("unknown option '%.*s'", (int)len, a);
        if (o->takes_value) {
            if (eq)
                o->value = eq + 1;
            else if (i + 1 < argc)
                o->value = argv[++i];
            else
                return zy_fail("option %s needs a value", o->name);
        } else {
            if (eq) return zy_fail("option %s takes no value", o->name);
            o->value = "1";
        }
        if (o->value && !strcmp(o->name, "--help")) break; /* the rest is not looked at */
    }
    return ZY_OK;
}

const char *args_get(const zy_opt *opts, const char *name) {
    for (const zy_opt *p = opts; p->name; p++)
        if (strcmp(p->name, name) == 0) return p->value;
    return NULL;
}

int args_cli(const char *cmd, const char *synopsis, zy_opt *opts, int argc, char **argv,
             const char **positional, int max_pos, int *npos) {
    ZY_CHECKF(args_get(opts, "--help") == NULL, "zayac %s: the option table was parsed before",
              cmd);
    int found = 0;
    for (const zy_opt *p = opts; p->name; p++) found |= !strcmp(p->name, "--help");
    ZY_CHECKF(found, "zayac %s: the option table has no --help", cmd);
    if (args_parse(argc, argv, opts, positional, max_pos, npos) != ZY_OK)
        return args_usage_error(cmd, synopsis, opts);
    if (args_get(opts, "--help")) {
        args_usage(cmd, synopsis, opts);
        return ZY_EXIT_OK;
    }
    return ARGS_RUN;
}

int args_usage_error(const char *cmd, const char *synopsis, const zy_opt *opts) {
    fprintf(stderr, "zayac %s: %s\n", cmd, zy_errmsg());
    args_usage(cmd, synopsis, opts);
    return ZY_EXIT_INPUT;
}

int args_int_in(const zy_opt *opts, const char *name, long long def, long long lo, long long hi,
                long long *out) {
    const char *v = args_get(opts, name);
    *out = def;
    if (!v) return ZY_OK;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    /* strtoll skips leading spaces; a value is digits with an optional sign, nothing around */
    if (end == v || *end || isspace((unsigned char)v[0]))
        return zy_fail("option %s: '%s' is not an integer", name, v);
    if (errno == ERANGE || x < lo || x > hi) {
        if (lo == LLONG_MIN && hi == LLONG_MAX)
            return zy_fail("option %s: '%s' is out of range", name, v);
        return zy_fail("option %s: %s is not in %lld..%lld", name, v, lo, hi);
    }
    *out = x;
    return ZY_OK;
}

int args_int(const zy_opt *opts, const char *name, long long def, long long *out) {
    return args_int_in(opts, name, def, LLONG_MIN, LLONG_MAX, out);
}

/* Parses an interval "(lo, hi]" (either bracket on either side; inf allowed). */
static void parse_range(const char *range, double *lo, double *hi, int *lo_open, int *hi_open) {
    char *end;
    ZY_CHECKF(range[0] == '(' || range[0] == '[', "bad range '%s'", range);
    *lo_open = range[0] == '(';
    *lo = strtod(range + 1, &end);
    ZY_CHECKF(*end == ',', "bad range '%s'", range);
    *hi = strtod(end + 1, &end);
    ZY_CHECKF((*end == ')' || *end == ']') && !end[1], "bad range '%s'", range);
    *hi_open = *end == ')';
}

int args_double_in(const zy_opt *opts, const char *name, double def, const char *range,
                   double *out) {
    double lo, hi;
    int lo_open, hi_open;
    parse_range(range, &lo, &hi, &lo_open, &hi_open);
    const char *v = args_get(opts, name);
    *out = def;
    if (!v) return ZY_OK;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || isspace((unsigned char)v[0]))
        return zy_fail("option %s: '%s' is not a number", name, v);
    int inside = isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
    if (errno == ERANGE || !inside) return zy_fail("option %s: %s is not in %s", name, v, range);
    *out = x;
    return ZY_OK;
}

int args_double(const zy_opt *opts, const char *name, double def, double *out) {
    return args_double_in(opts, name, def, "(-inf, inf)", out);
}

int args_choice(const zy_opt *opts, const char *name, const char *const *choices, int def,
                int *out) {
    const char *v = args_get(opts, name);
    *out = def;
    if (!v) return ZY_OK;
    char list[512] = "";
    for (int i = 0; choices[i]; i++) {
        if (!strcmp(v, choices[i])) {
            *out = i;
            return ZY_OK;
        }
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", choices[i]);
    }
    return zy_fail("option %s: '%s' is not one of %s", name, v, list);
}

void args_usage(const char *cmd, const char *synopsis, const zy_opt *opts) {
    FILE *f = args_get(opts, "--help") ? stdout : stderr;
    fprintf(f, "usage: zayac %s %s\n", cmd, synopsis);
    for (const zy_opt *p = opts; p->name; p++)
        fprintf(f, "  %-22s %s\n", strcmp(p->name, "--help") ? p->name : "-h, --help", p->help);
}

int cli_error(const char *cmd) {
    fprintf(stderr, "zayac %s: %s\n", cmd, zy_errmsg());
    return zy_err_exit_status();
}

static void list_subcmds(FILE *f, const char *cmd, const zy_subcmd *subs) {
    const char *sp = *cmd ? " " : "";
    fprintf(f, "usage: zayac%s%s COMMAND [options]   (zayac%s%s COMMAND --help for its options)\n",
            sp, cmd, sp, cmd);
    for (const zy_subcmd *s = subs; s->name; s++) fprintf(f, "  %-12s %s\n", s->name, s->help);
}

int args_dispatch(const char *cmd, const zy_subcmd *subs, int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : NULL;
    if (name && (is_help(name) || !strcmp(name, "help"))) {
        list_subcmds(stdout, cmd, subs);
        return ZY_EXIT_OK;
    }
    for (const zy_subcmd *s = subs; name && s->name; s++)
        if (!strcmp(name, s->name)) return s->run(argc - 1, argv + 1);
    const char *sp = *cmd ? " " : "";
    if (name)
        fprintf(stderr, "zayac%s%s: unknown command '%s'\n", sp, cmd, name);
    else
        fprintf(stderr, "zayac%s%s: name a command\n", sp, cmd);
    list_subcmds(stderr, cmd, subs);
    return ZY_EXIT_INPUT;
}
