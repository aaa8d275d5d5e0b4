/* zayac: the command-line tool. Dispatches to a subcommand; parsing lives in each cmd_*.c. */
#include "args.h"
#include "cmds.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const zy_subcmd commands[] = {
    {"info", cmd_info, "print a model's config and parameter counts"},
    {"init", cmd_init, "write a preset or HF config with fresh weights as an HF checkpoint"},
    {"export", cmd_export,
     "write a clean HF folder (weights, configs, tokenizer) from a checkpoint"},
    {"logits", cmd_logits, "run the model on token ids (.npy) and write logits (.npy)"},
    {"generate", cmd_generate, "generate tokens greedily or by sampling"},
    {"train", cmd_train, "train a model from a JSON training config"},
    {"eval", cmd_eval, "validation loss and perplexity of a checkpoint"},
    {"tokenizer", cmd_tokenizer, "train, encode and decode with a byte-level BPE tokenizer"},
    {"data", cmd_data, "prepare token shards from text files"},
    {"bench", cmd_bench, "benchmarks: collectives, gemm, membw, train"},
    {"launch", cmd_launch, "start one process per GPU (rank environment set)"},
    {"supervise", cmd_supervise,
     "run a training command and keep it going through crashes, hangs and divergence"},
    {"version", cmd_version, "print the version and whether CUDA is built in (also --version)"},
    {NULL, NULL, NULL},
};

/* OpenMP threads that spin while waiting (libgomp's default) starve each other and OpenBLAS on a
 * busy machine: measured on the 2-core CI machine, the tiny model trained at 400 tokens/s spinning
 * and 7,400 tokens/s with passive waiting. libgomp reads the policy when it loads, so the process
 * re-executes itself once with OMP_WAIT_POLICY=passive unless the user chose a policy. */
static void prefer_passive_openmp(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: then run as we are */
}

int main(int argc, char **argv) {
    prefer_passive_openmp(argv);
    if (argc == 2 && !strcmp(argv[1], "--version")) return cmd_version(1, argv + 1);
    return args_dispatch("", commands, argc, argv);
}
