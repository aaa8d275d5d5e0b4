/* zayac train: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac train: not implemented yet\n");
    return 2;
}
