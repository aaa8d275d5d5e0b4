/* Command-line options for the zayac subcommands: "--name value" and "--flag" options declared in
 * a table; an unknown option, a missing value or a stray argument is one clear error. */
#ifndef ZY_ARGS_H
#define ZY_ARGS_H

typedef struct {
    const char *name;  /* "--model" */
    int takes_value;   /* 1: "--name VALUE", 0: a flag */
    const char *help;  /* one line */
    const char *value; /* parsed: the value, "1" for a present flag, NULL when absent */
} zy_opt;

/* Parses argv[1..] against opts (terminated by name == NULL). Positional arguments are refused
 * unless positional != NULL, where they are collected (up to max_pos). */
int args_parse(int argc, char **argv, zy_opt *opts, const char **positional, int max_pos,
               int *npos);
/* The value of an option, or NULL. */
const char *args_get(const zy_opt *opts, const char *name);
/* An integer option (default when absent); an unparsable value is an error. */
int args_int(const zy_opt *opts, const char *name, long long def, long long *out);
int args_double(const zy_opt *opts, const char *name, double def, double *out);
/* Prints "usage: zayac CMD ..." and each option's help to stderr. */
void args_usage(const char *cmd, const char *synopsis, const zy_opt *opts);

#endif
