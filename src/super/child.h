/* One run of the supervised command: started in its own process group with its stdout and stderr
 * passed through the supervisor (which reads them line by line), watched, and ended with
 * everything it started. */
#ifndef ZY_SUPER_CHILD_H
#define ZY_SUPER_CHILD_H

#include <stddef.h>
#include <sys/types.h>

typedef void (*child_line_fn)(void *user, int is_stderr, const char *line);

typedef struct {
    pid_t pid;
    int fd[2];        /* the command's stdout and stderr (read ends); -1 once closed */
    char *pending[2]; /* a line not yet ended by '\n' */
    size_t pending_len[2];
    child_line_fn on_line;
    void *user;
} super_child;

/* Starts argv (argv[0] found on PATH) with the variables env ("NAME=VALUE", NULL-terminated) added
 * to this environment. Returns ZY_ERR (runtime) when it cannot be started. */
int child_start(super_child *c, char *const argv[], char *const env[], child_line_fn on_line,
                void *user);
/* Passes what the command wrote (up to timeout_ms of waiting) to the streams and on_line. */
void child_pump(super_child *c, int timeout_ms);
/* Whether it ended: 1 with its wait status in *status, else 0. */
int child_ended(super_child *c, int *status);
/* Sends sig to the command itself (the launcher, which passes a stop on to its ranks). */
void child_signal(const super_child *c, int sig);
/* SIGKILL to the command, every process it started (found through /proc below this process, so
 * ranks that left the group go too) and its process group; also after it ended (what it left). */
void child_kill_all(const super_child *c);
/* After it ended: what is left in the pipes (at most timeout_ms), then the pipes closed. */
void child_finish(super_child *c, int timeout_ms);

#endif
