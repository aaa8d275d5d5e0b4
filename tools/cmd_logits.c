/* zayac logits: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac logits: not implemented yet\n");
    return 2;
}
