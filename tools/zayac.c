/* zayac: the command-line tool. Dispatches to a subcommand; parsing lives in each cmd_*.c. */
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} zy_command;

static const zy_command commands[] = {
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
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: zayac COMMAND [options]   (zayac COMMAND --help for a command's options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

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
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "zayac: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
