/* zayac init: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_init(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac init: not implemented yet\n");
    return 2;
}
