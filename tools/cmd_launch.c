/* zayac launch: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_launch(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac launch: not implemented yet\n");
    return 2;
}
