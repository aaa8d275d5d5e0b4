/* Hugging Face checkpoint folders: the weights of a parameter table as DIR/model.safetensors, or
 * sharded as DIR/model.safetensors.index.json + the shard files its weight_map names. Names are the
 * HF `zaya` names (the table's names), so transformers reads what we write and we read what it
 * writes with no renaming. The config.json beside them is config_load/config_save's job. */
#ifndef ZY_HF_CHECKPOINT_H
#define ZY_HF_CHECKPOINT_H

#include "io/safetensors.h"
#include "tensor/params.h"

/* Loads every tensor of the table into buf (fp32, laid out by the table's offsets) from DIR's
 * model.safetensors, else from its sharded index. Each tensor must be present with the table's
 * shape and a float dtype; a tensor the table does not know is an error (except lm_head.weight,
 * which tied checkpoints may carry and which is ignored). On error buf is left unchanged. */
int hf_load_weights(const char *dir, const zy_param_table *t, float *buf);
/* Writes DIR/model.safetensors atomically (DIR is created if needed) with every table tensor in
 * dtype ZY_ST_F32 or ZY_ST_BF16 (round to nearest even); ZY_PARAM_BUFFER tensors (the router's
 * balancing biases) stay F32 either way. __metadata__ is {"format": "pt"} as transformers expects.
 */
int hf_save_weights(const char *dir, const zy_param_table *t, const float *buf, zy_st_dtype dtype);
/* Writes table entries [first, last) as one safetensors file at path (a shard of a sharded folder,
 * whose index the caller writes: hf_index_json). */
int hf_save_weights_range(const char *path, const zy_param_table *t, const float *buf,
                          zy_st_dtype dtype, int first, int last);
/* model.safetensors.index.json's text for a folder whose entry i is in file files[shard_of[i]]. */
char *hf_index_json(const zy_param_table *t, zy_st_dtype dtype, const int *shard_of,
                    const char *const *files);
/* The same, split as transformers splits: when the tensors pass shard_bytes (> 0), files
 * model-0000i-of-0000n.safetensors of at most shard_bytes each (a larger tensor gets a file of its
 * own), in table order, and model.safetensors.index.json ({"metadata": {"total_size"},
 * "weight_map"}) written last; otherwise model.safetensors. *n_files (may be NULL) gets the count.
 */
int hf_save_weights_sharded(const char *dir, const zy_param_table *t, const float *buf,
                            zy_st_dtype dtype, uint64_t shard_bytes, int *n_files);

#endif
