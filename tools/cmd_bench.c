/* zayac bench: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac bench: not implemented yet\n");
    return 2;
}
