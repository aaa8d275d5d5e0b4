/* See child.h. */
#include "super/child.h"
#include "base/err.h"
#include "base/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int child_start(super_child *c, char *const argv[], char *const env[], child_line_fn on_line,
                void *user) {
    memset(c, 0, sizeof *c);
    c->on_line = on_line;
    c->user = user;
    int out[2], err[2];
    if (pipe(out) != 0) return zy_fail_runtime("pipe: %s", strerror(errno));
    if (pipe(err) != 0) {
        close(out[0]), close(out[1]);
        return zy_fail_runtime("pipe: %s", strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        return zy_fail_runtime("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: a terminal's Ctrl-C reaches the supervisor alone */
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]), close(out[1]), close(err[0]), close(err[1]);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        for (char *const *e = env; e && *e; e++) putenv(*e);
        execvp(argv[0], argv);
        fprintf(stderr, "zayac supervise: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(2); /* the command cannot start: retrying will not help */
    }
    setpgid(pid, pid); /* also here, so the group exists before either side goes on */
    close(out[1]), close(err[1]);
    c->pid = pid;
    c->fd[0] = out[0];
    c->fd[1] = err[0];
    return ZY_OK;
}

/* Splits what arrived into lines for on_line and copies it to this process's stream. */
static void take(super_child *c, int k, const char *buf, size_t n) {
    fwrite(buf, 1, n, k ? stderr : stdout);
    fflush(k ? stderr : stdout);
    c->pending[k] = zy_realloc(c->pending[k], c->pending_len[k] + n + 1);
    memcpy(c->pending[k] + c->pending_len[k], buf, n);
    c->pending_len[k] += n;
    c->pending[k][c->pending_len[k]] = 0;
    char *start = c->pending[k], *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = 0;
        if (c->on_line) c->on_line(c->user, k, start);
        start = nl + 1;
    }
    const size_t rest = c->pending_len[k] - (size_t)(start - c->pending[k]);
    memmove(c->pending[k], start, rest + 1);
    c->pending_len[k] = rest;
}

void child_pump(super_child *c, int timeout_ms) {
    struct pollfd p[2];
    int n = 0, which[2];
    for (int k = 0; k < 2; k++)
        if (c->fd[k] >= 0) {
            p[n].fd = c->fd[k];
            p[n].events = POLLIN;
            which[n++] = k;
        }
    if (n == 0) {
        usleep((useconds_t)timeout_ms * 1000);
        return;
    }
    if (poll(p, (nfds_t)n, timeout_ms) <= 0) return;
    for (int i = 0; i < n; i++) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int k = which[i];
        char buf[8192];
        ssize_t got = read(c->fd[k], buf, sizeof buf);
        if (got > 0) {
            take(c, k, buf, (size_t)got);
        } else if (got == 0 || errno != EINTR) {
            close(c->fd[k]);
            c->fd[k] = -1;
        }
    }
}

int child_ended(super_child *c, int *status) {
    return waitpid(c->pid, status, WNOHANG) == c->pid;
}

void child_signal(const super_child *c, int sig) {
    if (c->pid > 0) kill(c->pid, sig);
}

/* The descendants of root (root excluded) into out (at most max), from /proc/N/stat parents. */
static int descendants(pid_t root, pid_t *out, int max) {
    enum { MAX_PROCS = 65536 };
    pid_t *pid = zy_malloc(MAX_PROCS * sizeof *pid), *ppid = zy_malloc(MAX_PROCS * sizeof *ppid);
    const int n = zy_proc_list(pid, ppid, MAX_PROCS);
    int found = 0;
    /* breadth first: each found process's children join the list */
    for (int head = -1; head < found; head++) {
        const pid_t parent = head < 0 ? root : out[head];
        for (int i = 0; i < n && found < max; i++)
            if (ppid[i] == parent) out[found++] = pid[i];
    }
    free(pid);
    free(ppid);
    return found;
}

void child_kill_all(const super_child *c) {
    if (c->pid <= 0) return;
    pid_t below[4096];
    /* the supervisor is a subreaper (supervise.c), so ranks orphaned by a dead launcher are still
     * found below it; listed before anything dies and is re-parented */
    const int n = descendants(getpid(), below, 4096);
    for (int i = 0; i < n; i++) kill(below[i], SIGKILL);
    killpg(c->pid, SIGKILL);
}

void child_finish(super_child *c, int timeout_ms) {
    for (int waited = 0; (c->fd[0] >= 0 || c->fd[1] >= 0) && waited < timeout_ms; waited += 50)
        child_pump(c, 50);
    for (int k = 0; k < 2; k++) {
        if (c->pending_len[k] && c->on_line) c->on_line(c->user, k, c->pending[k]);
        free(c->pending[k]);
        c->pending[k] = NULL;
        c->pending_len[k] = 0;
        if (c->fd[k] >= 0) close(c->fd[k]);
        c->fd[k] = -1;
    }
}
