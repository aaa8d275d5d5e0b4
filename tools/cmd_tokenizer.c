/* zayac tokenizer: placeholder until its issue lands. */
#include "cmds.h"

#include <stdio.h>

int cmd_tokenizer(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zayac tokenizer: not implemented yet\n");
    return 2;
}
