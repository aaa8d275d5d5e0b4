/* zayac generate: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac generate: not implemented yet\n");
    return 2;
}
