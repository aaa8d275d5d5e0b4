/* Local launcher (see launch.h). Each rank runs in its own process group, so stopping a rank also
 * stops what it started (a shell's children); groups are signalled by their leader's pid. */
#include "dist/launch.h"
#include "base/err.h"
#include "base/timer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int dist_free_port(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return zy_fail_runtime("launch: socket: %s", strerror(errno));
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        int e = errno;
        close(fd);
        return zy_fail_runtime("launch: cannot find a free TCP port: %s", strerror(e));
    }
    *port = ntohs(sa.sin_port);
    close(fd);
    return ZY_OK;
}

static void set_int_env(const char *name, int v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

/* In the child: sets the rank variables and replaces the process with argv. */
static void exec_rank(char *const argv[], int local, int n, int node_rank, int nnodes,
                      const char *addr, int port) {
    setpgid(0, 0);
    const int rank = node_rank * n + local;
    set_int_env("RANK", rank);
    set_int_env("WORLD_SIZE", nnodes * n);
    set_int_env("LOCAL_RANK", local);
    set_int_env("LOCAL_WORLD_SIZE", n);
    set_int_env("MASTER_PORT", port);
    setenv("MASTER_ADDR", addr, 1);
    execvp(argv[0], argv);
    fprintf(stderr, "zayac launch: rank %d: cannot run '%s': %s\n", rank, argv[0], strerror(errno));
    _exit(127);
}

static int status_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

static void signal_groups(const pid_t *pids, const int *alive, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (alive[i]) kill(-pids[i], sig);
}

int dist_launch(const dist_launch_opts *o, char *const argv[], int *exit_code) {
    *exit_code = 0;
    int n = o->nprocs;
    if (n < 1) return zy_fail("launch: the number of ranks must be at least 1, got %d", n);
    if (!argv || !argv[0]) return zy_fail("launch: no command to run");
    const int nnodes = o->nnodes > 1 ? o->nnodes : 1;
    if (o->node_rank < 0 || o->node_rank >= nnodes)
        return zy_fail("launch: --node-rank %d is not in 0..%d (--nnodes %d)", o->node_rank,
                       nnodes - 1, nnodes);
    if (nnodes > 1 && (o->master_port == 0 || !o->master_addr))
        return zy_fail("launch: --nnodes %d needs --master-addr (node 0's address) and "
                       "--master-port, the same on every node",
                       nnodes);
    const char *addr = o->master_addr ? o->master_addr : "127.0.0.1";
    int port = o->master_port;
    if (port == 0) ZY_TRY(dist_free_port(&port));
    double grace = o->grace_s > 0 ? o->grace_s : 5.0;

    pid_t *pids = zy_calloc((size_t)n, sizeof(pid_t));
    int *alive = zy_calloc((size_t)n, sizeof(int));
    if (o->log) fflush(o->log);
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            signal_groups(pids, alive, r, SIGKILL);
            for (int q = 0; q < r; q++) waitpid(pids[q], NULL, 0);
            free(pids), free(alive);
            return zy_fail_runtime("launch: fork for rank %d: %s", r, strerror(e));
        }
        if (pid == 0) exec_rank(argv, r, n, o->node_rank, nnodes, addr, port);
        setpgid(pid, pid); /* also in the child: whichever runs first */
        pids[r] = pid;
        alive[r] = 1;
    }

    /* A rank that exits 3 stopped on request after a checkpoint (a signal or --stop-after the
     * ranks agreed on): not a failure, the others stop at the same step. */
    int nalive = n, failed_rank = -1, code = 0, stopped = 0, forwarded = 0;
    double kill_at = 0;
    while (nalive > 0) {
        int progressed = 0;
        for (int r = 0; r < n; r++) {
            if (!alive[r]) continue;
            int st;
            pid_t w = waitpid(pids[r], &st, WNOHANG);
            if (w == 0 || (w < 0 && errno == EINTR)) continue;
            alive[r] = 0;
            nalive--;
            progressed = 1;
            int c = w < 0 ? 1 : status_code(st);
            if (c == LAUNCH_EXIT_STOPPED && w > 0 && WIFEXITED(st)) {
                stopped = 1;
                continue;
            }
            if (c != 0 && failed_rank < 0) {
                failed_rank = r;
                code = c;
                if (o->log) {
                    if (w > 0 && WIFSIGNALED(st))
                        fprintf(o->log, "zayac launch: rank %d was killed by signal %d (%s)", r,
                                WTERMSIG(st), strsignal(WTERMSIG(st)));
                    else
                        fprintf(o->log, "zayac launch: rank %d exited with code %d", r, c);
                    fprintf(o->log, nalive ? "; stopping the other %d rank(s)\n" : "\n", nalive);
                }
                signal_groups(pids, alive, n, SIGTERM);
                kill_at = zy_now() + grace;
            }
        }
        /* The launcher's own stop signal (preemption, Ctrl-C) goes to every rank, which finish
         * their step, save together and exit 3; a second signal kills them. */
        if (o->stop_signal && *o->stop_signal) {
            const int sig = (int)*o->stop_signal;
            *o->stop_signal = 0;
            if (!forwarded) {
                if (o->log)
                    fprintf(o->log,
                            "zayac launch: signal %d: passing it to %d rank(s), which save and "
                            "stop (a second signal kills them)\n",
                            sig, nalive);
                signal_groups(pids, alive, n, sig);
                forwarded = 1;
            } else {
                if (o->log) fprintf(o->log, "zayac launch: second signal: killing the ranks\n");
                signal_groups(pids, alive, n, SIGKILL);
                if (failed_rank < 0) failed_rank = n, code = 128 + sig;
            }
        }
        if (kill_at > 0 && zy_now() > kill_at) {
            signal_groups(pids, alive, n, SIGKILL);
            kill_at = zy_now() + 3600; /* once */
        }
        if (!progressed && nalive > 0) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (failed_rank < 0 && stopped) code = LAUNCH_EXIT_STOPPED;
    free(pids);
    free(alive);
    *exit_code = code;
    return ZY_OK;
}
