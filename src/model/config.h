/* The ZAYA1 model configuration: the fields of a Hugging Face `config.json` with model_type "zaya".
 * Reading validates every field (a bad value is an error naming the field and the file); writing
 * emits a file transformers' ZayaConfig loads as it is. */
#ifndef ZY_CONFIG_H
#define ZY_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define ZY_MAX_LAYERS 256
#define ZY_MAX_EOS    16
/* The most parameters a config may have (2^48, about 2.8e14: a petabyte of fp32 weights). */
#define ZY_MAX_PARAMS_LOG2 48
#define ZY_MAX_PARAMS      ((size_t)1 << ZY_MAX_PARAMS_LOG2)
/* The skip class's balancing bias (last of a layer's E+1): the initial value, the value training
 * keeps it at (only bias differences route; see optim/balance.h) and the one transformers 5.17
 * sets on every load (see io/hf_model.h). */
#define ZY_SKIP_BIAS (-1.0f)

typedef enum { ZY_LAYER_HYBRID = 0, ZY_LAYER_HYBRID_SLIDING = 1 } zy_layer_type;

/* RoPE settings of one layer type (HF rope_parameters[layer_type]). */
typedef struct {
    double theta;                 /* rope_theta */
    double partial_rotary_factor; /* fraction of head_dim that is rotated */
    int present;                  /* 1 if the config names this layer type's parameters */
} zy_rope_params;

typedef struct {
    int vocab_size;                /* V */
    int hidden_size;               /* D */
    int num_hidden_layers;         /* L */
    int num_attention_heads;       /* Hq */
    int num_key_value_heads;       /* Hk */
    int head_dim;                  /* d */
    int num_experts;               /* E (the router scores E+1 classes: the last is skip) */
    int num_experts_per_tok;       /* must be 1 */
    int moe_intermediate_size;     /* F */
    int router_hidden_size;        /* R */
    int max_position_embeddings;   /* */
    int cca_time0, cca_time1;      /* kernel sizes of the depthwise and grouped convolutions */
    int sliding_window;            /* 0 = none; required when a layer is hybrid_sliding */
    int tie_word_embeddings;       /* must be 1 */
    int attention_bias;            /* must be 0 */
    int lm_head_bias;              /* must be 0 */
    int pad_token_id;              /* -1 = none */
    int bos_token_id;              /* -1 = none */
    int eos_token_ids[ZY_MAX_EOS]; /* eos_token_id: one id or every id of a list, in order */
    int n_eos;                     /* ids in eos_token_ids; 0 = none (null) */
    int eos_is_list;               /* eos_token_id was (and is written back as) a list */
    double attention_dropout;      /* read and written back; training refuses anything but 0 */
    double rms_norm_eps;
    double initializer_range; /* std of normal init for matrices and the embedding */
    char hidden_act[16];      /* must be "silu" */
    char dtype[16];           /* the weights' dtype as HF names it: "float32", "bfloat16" */
    zy_rope_params rope[2];   /* indexed by zy_layer_type */
    uint8_t layer_types[ZY_MAX_LAYERS]; /* zy_layer_type per layer */
} zy_config;

/* Fills the HF ZayaConfig defaults (the full ZAYA1-base shape). */
void config_defaults(zy_config *c);
/* Checks every field, and that the sizes fit (widths in int, at most ZY_MAX_PARAMS parameters,
 * counted with overflow checks); the error names the field and `source` (a file name or "preset
 * tiny"). */
int config_validate(const zy_config *c, const char *source);
/* Parses a config.json text over the defaults; `source` names it in errors. Checks JSON types (a
 * string where a number belongs is an error) but not values: call config_validate. Unknown keys are
 * ignored; a repeated key takes its last value, as Python's json does. */
int config_parse_json(zy_config *c, const char *json, const char *source);
/* Reads and validates DIR/config.json or a config.json path. */
int config_load(zy_config *c, const char *path);
/* Serialises as HF config.json text (heap string, caller frees). */
char *config_to_json(const zy_config *c);
/* Writes config.json into a directory atomically. */
int config_save(const zy_config *c, const char *dir);
/* Fills and validates a named preset: "tiny", "bench-small", "bench-base", "zaya1-base", from
 * configs/<name>.json under $ZAYAC_ROOT, the current directory or the executable's folder and its
 * parents when found (a broken file there is an error, not skipped), else from the built-in copy.
 */
int config_preset(zy_config *c, const char *name);

/* Fills a built-in preset, ignoring configs/ files (the copy compiled into the binary). */
int config_preset_builtin(zy_config *c, const char *name);
/* Name of built-in preset i (0, 1, ...), or NULL past the last. */
const char *config_preset_name(int i);
/* Finds configs/<name>.json under $ZAYAC_ROOT, the current directory, or the executable's folder
 * and its parents; returns 1 and writes the path into out[n] when found, else 0. */
int config_preset_path(const char *name, char *out, size_t n);

/* 1 when id is one of the config's eos ids (any of them ends generation). */
int config_is_eos(const zy_config *c, int id);
/* Sets a single eos id (-1: none). */
void config_set_eos(zy_config *c, int id);

/* Rotated channels per head for a layer: d * partial_rotary_factor (even). */
int config_rotary_dim(const zy_config *c, int layer);

#endif
