/* The table of training settings: every key of the training config (its dotted path such as
 * "optimizer.lr", type, range, default, a one-line doc and the zy_train_config field it fills) in
 * one place (settings_table.c). The machinery here reads a config's JSON tree through the table
 * (types and ranges checked; an unknown key is an error with a did-you-mean), applies --set
 * overrides parsed by each key's type, fills the defaults, prints a resolved config as JSON and
 * lists the table as markdown (the README's list of keys). Cross-field checks live in
 * train_config.c. The "model" value is Hugging Face's format (model/config.c), read as it is. */
#ifndef ZY_TRAIN_SETTINGS_H
#define ZY_TRAIN_SETTINGS_H

#include "train/train_config.h"

#include <cjson/cJSON.h>
#include <stddef.h>

typedef enum {
    ZY_SET_INT = 0, /* int, integer values */
    ZY_SET_I64,     /* int64_t, integer values */
    ZY_SET_U64,     /* uint64_t, integer values (JSON numbers are exact to 2^53) */
    ZY_SET_FLOAT,   /* float */
    ZY_SET_BOOL,    /* int 0/1; true, false, 0 or 1 */
    ZY_SET_STR,     /* char[size]; null reads as "" */
    ZY_SET_CHOICE,  /* char[size] holding one of choices */
    ZY_SET_ENUM,    /* int: the index of one of choices */
    ZY_SET_CUSTOM,  /* read and write hooks (model, data, prompts) */
} zy_setting_type;

typedef struct {
    const char *key; /* dotted path in the config: "steps", "optimizer.lr" */
    zy_setting_type type;
    size_t offset;              /* of the field in zy_train_config */
    size_t size;                /* of the field (strings: the buffer) */
    double lo, hi;              /* numbers: the accepted range, both ends included */
    const char *const *choices; /* CHOICE, ENUM: the accepted names (NULL-terminated) */
    const char *def;            /* the default, as JSON text */
    const char *doc;            /* one line for the README */
    /* CUSTOM: the type's name in the listing, a reader of a JSON value into c (errors name source
     * and key) and a writer of c's value as a new JSON item */
    const char *type_name;
    int (*read)(zy_train_config *c, const cJSON *v, const char *source);
    cJSON *(*write)(const zy_train_config *c);
} zy_setting;

/* The table (settings_table.c) and its length. */
extern const zy_setting zy_settings[];
extern const int zy_settings_count;

/* The entry for a dotted key, or NULL. */
const zy_setting *settings_find(const char *key);
/* The table key closest to `key` by edit distance (whole path or last part), or NULL when none
 * is close enough to be a likely typo. */
const char *settings_suggest(const char *key);
/* Sets every table field of c to its default (other fields are left alone). */
void settings_defaults(zy_train_config *c);
/* Reads every table key present in root into c; an unknown key, a wrong type or a value out of
 * range is an error naming source, the key, the value and what is accepted. */
int settings_read(zy_train_config *c, const cJSON *root, const char *source);
/* Applies one "key=value" override to root: the value is parsed by the key's type (numbers,
 * true/false, a string as it is or as a JSON string literal, JSON for lists and model); keys
 * under "model." go into an inline model object as JSON values. */
int settings_override(cJSON *root, const char *assignment);
/* "key=<value as a JSON string literal>" (heap): an override that gives a string setting (or
 * "model") exactly value, whatever quotes or backslashes it holds. For options that name a path. */
char *settings_string_override(const char *key, const char *value);
/* Every table key of c as a JSON tree (caller deletes): the resolved config. */
cJSON *settings_to_json(const zy_train_config *c);
/* The table as markdown (key, type, default, range, doc); heap string. */
char *settings_markdown(void);

/* Shared by the custom readers: v must be a number in [lo, hi] (an integer when integer); label
 * names it in the error ("data[1].weight"). */
int settings_number(const cJSON *v, const char *source, const char *label, double lo, double hi,
                    int integer, double *out);

#endif
