/* zayac eval: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac eval: not implemented yet\n");
    return 2;
}
