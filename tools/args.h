/* Command-line options for the zayac subcommands: "--name value" and "--flag" options declared in
 * a table, option values checked against their range or set of choices, subcommand dispatch, and
 * the one path by which a command reports an error and picks its exit status (README "Exit
 * statuses"): --help prints to stdout and exits 0; a usage error or a bad option value exits 2;
 * any other failure exits with the kind its library call recorded (base/err.h). */
#ifndef ZY_ARGS_H
#define ZY_ARGS_H

typedef struct {
    const char *name;  /* "--model" */
    int takes_value;   /* 1: "--name VALUE", 0: a flag */
    const char *help;  /* one line */
    const char *value; /* parsed: the value, "1" for a present flag, NULL when absent */
} zy_opt;

/* Returned by args_cli when the command should go on and run. */
#define ARGS_RUN (-1)

/* Parses argv[1..] against opts (terminated by name == NULL). "-h" counts as "--help" (which the
 * table must hold) and ends the parse. Positional arguments are refused unless positional != NULL,
 * where they are collected (up to max_pos). */
int args_parse(int argc, char **argv, zy_opt *opts, const char **positional, int max_pos,
               int *npos);
/* A command's front door: args_parse, then on --help the usage on stdout (returns 0), on a usage
 * error "zayac CMD: <error>" and the usage on stderr (returns 2), else ARGS_RUN. */
int args_cli(const char *cmd, const char *synopsis, zy_opt *opts, int argc, char **argv,
             const char **positional, int max_pos, int *npos);
/* After zy_fail() with a usage problem (a required option missing): the error and the usage on
 * stderr; returns 2. */
int args_usage_error(const char *cmd, const char *synopsis, const zy_opt *opts);
/* The value of an option, or NULL. */
const char *args_get(const zy_opt *opts, const char *name);
/* An integer option (def when absent): a value with anything but digits and a sign, or outside
 * [lo, hi], is an error naming the option and the range. args_int takes any long long. */
int args_int_in(const zy_opt *opts, const char *name, long long def, long long lo, long long hi,
                long long *out);
int args_int(const zy_opt *opts, const char *name, long long def, long long *out);
/* A finite number option (def when absent) within range, written as an interval: "(0, 1]",
 * "[0, inf)" ("(" and ")" exclude the bound); anything else is an error naming the option and the
 * range. args_double takes any finite number. */
int args_double_in(const zy_opt *opts, const char *name, double def, const char *range,
                   double *out);
int args_double(const zy_opt *opts, const char *name, double def, double *out);
/* An option taking one of choices (NULL-terminated): *out = its index, def when absent; another
 * value is an error naming the option and the choices. */
int args_choice(const zy_opt *opts, const char *name, const char *const *choices, int def,
                int *out);
/* Prints "usage: zayac CMD SYNOPSIS" and each option's help: to stdout when --help was asked
 * (the table's --help is set), else to stderr (with a usage error). */
void args_usage(const char *cmd, const char *synopsis, const zy_opt *opts);
/* Prints "zayac CMD: <the thread's error>" to stderr; returns the exit status its kind calls for
 * (2 bad input, 1 runtime failure). */
int cli_error(const char *cmd);

/* A subcommand of a command with several (zayac itself, data, tokenizer, bench). */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name; returns exit status */
    const char *help;                  /* one line */
} zy_subcmd;

/* Runs the subcommand argv[1] names (subs ends with name == NULL). "--help", "-h" or "help" list
 * them on stdout (returns 0); none or an unknown name lists them on stderr (returns 2). cmd is
 * "" for zayac itself. */
int args_dispatch(const char *cmd, const zy_subcmd *subs, int argc, char **argv);

#endif
