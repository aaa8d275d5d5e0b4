/* zayac data: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_data(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac data: not implemented yet\n");
    return 2;
}
