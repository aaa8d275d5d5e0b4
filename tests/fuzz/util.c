/* Helpers of the fuzz targets (see fuzz.h): the input as a scratch file or as NUL-terminated text.
 */
#include "fuzz.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *fuzz_scratch_dir(void) {
    const char *dir = getenv("TMPDIR");
    if (dir && *dir) return dir;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

const char *fuzz_input_file(const uint8_t *data, size_t size) {
    static char path[512];
    static pid_t owner;
    if (owner != getpid()) { /* a forked child writes its own file */
        snprintf(path, sizeof path, "%s/zayac-fuzz-%d.in", fuzz_scratch_dir(), (int)getpid());
        owner = getpid();
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(path);
        abort(); /* the harness cannot work: stop loudly rather than test nothing */
    }
    for (size_t at = 0; at < size;) {
        ssize_t k = write(fd, data + at, size - at);
        if (k <= 0) {
            perror(path);
            abort();
        }
        at += (size_t)k;
    }
    close(fd);
    return path;
}

char *fuzz_input_text(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}
