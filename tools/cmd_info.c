/* zayac info: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac info: not implemented yet\n");
    return 2;
}
