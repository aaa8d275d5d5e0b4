/* Option parsing for subcommands (see args.h). */
#include "args.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int args_parse(int argc, char **argv, zy_opt *opts, const char **positional, int max_pos,
               int *npos) {
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strlen(a) == 2) {
            if (!positional || np >= max_pos) return zy_fail("unexpected argument '%s'", a);
            positional[np++] = a;
            continue;
        }
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
    }
    if (npos) *npos = np;
    return ZY_OK;
}

const char *args_get(const zy_opt *opts, const char *name) {
    for (const zy_opt *p = opts; p->name; p++)
        if (strcmp(p->name, name) == 0) return p->value;
    return NULL;
}

int args_int(const zy_opt *opts, const char *name, long long def, long long *out) {
    const char *v = args_get(opts, name);
    if (!v) {
        *out = def;
        return ZY_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) return zy_fail("option %s: '%s' is not an integer", name, v);
    *out = x;
    return ZY_OK;
}

int args_double(const zy_opt *opts, const char *name, double def, double *out) {
    const char *v = args_get(opts, name);
    if (!v) {
        *out = def;
        return ZY_OK;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end) return zy_fail("option %s: '%s' is not a number", name, v);
    *out = x;
    return ZY_OK;
}

void args_usage(const char *cmd, const char *synopsis, const zy_opt *opts) {
    fprintf(stderr, "usage: zayac %s %s\n", cmd, synopsis);
    for (const zy_opt *p = opts; p->name; p++)
        fprintf(stderr, "  %-22s %s\n", p->takes_value ? p->name : p->name, p->help);
}
