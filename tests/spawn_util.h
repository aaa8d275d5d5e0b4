/* Shared by the tests that run the zayac binary: spawn it with arguments, capture stdout/stderr. */
#ifndef ZY_SPAWN_UTIL_H
#define ZY_SPAWN_UTIL_H

#include "base/err.h"
#include "base/fileio.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

typedef struct {
    int code;  /* exit status; -signal when killed */
    char *out; /* stdout text */
    char *err; /* stderr text */
} run_result;

static inline void result_free(run_result *r) {
    free(r->out);
    free(r->err);
}

/* Runs bin with args (NULL-terminated, without argv[0]); stdout/stderr go through files in
 * capture_dir. Returns code -1000 with err set when the process could not be started. */
static inline run_result spawn_capture(const char *bin, const char *capture_dir,
                                       const char *const *args) {
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    for (; *args && n < 63; args++) argv[n++] = *args;
    argv[n] = NULL;
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", capture_dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", capture_dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    fflush(NULL);
    int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    run_result r = {-1000, NULL, NULL};
    if (rc != 0) {
        r.out = zy_strdup("");
        r.err = zy_strdup(strerror(rc));
        return r;
    }
    int status;
    waitpid(pid, &status, 0);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    if (zy_read_file(out_path, &r.out, NULL) != ZY_OK) r.out = zy_strdup("");
    if (zy_read_file(err_path, &r.err, NULL) != ZY_OK) r.err = zy_strdup("");
    return r;
}

/* Makes a sanitizer report in a child exit with `code` (kept apart from the CLI's statuses 1-3)
 * by appending exitcode= to ASAN_OPTIONS and UBSAN_OPTIONS, which children inherit. */
static inline void spawn_sanitizer_exit(int code) {
    char opts[1024];
    const char *asan = getenv("ASAN_OPTIONS"), *ubsan = getenv("UBSAN_OPTIONS");
    snprintf(opts, sizeof opts, "%s%sexitcode=%d", asan ? asan : "", asan && *asan ? ":" : "",
             code);
    setenv("ASAN_OPTIONS", opts, 1);
    snprintf(opts, sizeof opts, "%s%sexitcode=%d:print_stacktrace=1", ubsan ? ubsan : "",
             ubsan && *ubsan ? ":" : "", code);
    setenv("UBSAN_OPTIONS", opts, 1);
}

#endif
