/* zayac version (and zayac --version): the build's version and whether CUDA is built in. The
 * Makefile passes ZAYAC_VERSION (git describe of the checkout it was built from) to this file
 * only, so a new commit recompiles this file and nothing else. */
#include "args.h"
#include "cmds.h"

#include <stdio.h>

#ifndef ZAYAC_VERSION
#define ZAYAC_VERSION "unknown"
#endif

#ifdef ZY_HAVE_CUDA
#define ZY_CUDA_BUILT "CUDA built in"
#else
#define ZY_CUDA_BUILT "CPU only, no CUDA"
#endif

int cmd_version(int argc, char **argv) {
    zy_opt opts[] = {{"--help", 0, "this help", NULL}, {NULL, 0, NULL, NULL}};
    int done = args_cli("version", "", opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    printf("zayac %s (%s)\n", ZAYAC_VERSION, ZY_CUDA_BUILT);
    return 0;
}
