/* zayac launch: starts one process per GPU on this host (`zayac launch -n N -- CMD ARGS...`) with
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; when a rank
 * fails the others are stopped and its exit code is returned. CPU ranks (`--cpu`) talk over MPI,
 * so for them launch hands the command to Open MPI's mpirun. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "base/proc.h"
#include "dist/launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) {
    stop_signal = sig;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: zayac launch -n N [--nnodes H --node-rank I --master-addr A --master-port P] "
            "[--grace S] [--cpu] -- COMMAND [ARGS...]\n"
            "  -n, --nprocs N   ranks to start (one per GPU)\n"
            "  --nnodes H       hosts of the job (each runs zayac launch; world = H * N)\n"
            "  --node-rank I    this host's index, 0..H-1 (its ranks: I*N .. I*N+N-1)\n"
            "  --master-port P  rendezvous port for MASTER_PORT (default: a free port; "
            "required with --nnodes)\n"
            "  --master-addr A  MASTER_ADDR: node 0's address (default 127.0.0.1; required with "
            "--nnodes)\n"
            "  --grace S        seconds between SIGTERM and SIGKILL when stopping the ranks after "
            "one failed (default 5)\n"
            "  --cpu            CPU ranks: run the command under Open MPI's mpirun -n N (a stop "
            "signal goes to the ranks, not to mpirun)\n"
            "When a rank exits with an error the others are stopped and its exit code is "
            "returned.\nSIGTERM or SIGINT to the launcher goes to every rank (zayac train saves "
            "and exits 3; then so does the launcher); a second one kills them.\n");
}

static int parse_int(const char *name, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi)
        return zy_fail("%s: '%s' is not an integer in %ld..%ld", name, v ? v : "", lo, hi);
    *out = x;
    return ZY_OK;
}

/* Sends sig to the processes whose parent is `parent` (mpirun's ranks on this host: Open MPI
 * forks them itself). */
static void signal_children(pid_t parent, int sig) {
    enum { MAX_PROCS = 65536 };
    pid_t *pid = zy_malloc(MAX_PROCS * sizeof *pid), *ppid = zy_malloc(MAX_PROCS * sizeof *ppid);
    const int n = zy_proc_list(pid, ppid, MAX_PROCS);
    for (int i = 0; i < n; i++)
        if (ppid[i] == parent) kill(pid[i], sig);
    free(pid);
    free(ppid);
}

/* CPU ranks: the command under `mpirun -n N`, as a child. A stop signal to the launcher goes to
 * the ranks themselves, not to mpirun (which would kill them moments later): they finish their
 * step, save together and exit 3, which mpirun then returns. A second signal kills mpirun. */
static int launch_mpi(int n, char **cmd) {
    char nprocs[16];
    snprintf(nprocs, sizeof nprocs, "%d", n);
    int count = 0;
    while (cmd[count]) count++;
    char **args = zy_calloc((size_t)count + 5, sizeof *args);
    args[0] = "mpirun";
    args[1] = "--oversubscribe";
    args[2] = "-n";
    args[3] = nprocs;
    memcpy(args + 4, cmd, (size_t)count * sizeof *args);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        execvp("mpirun", args);
        fprintf(stderr,
                "zayac launch: CPU ranks run under Open MPI's mpirun, which cannot be started "
                "(%s): install openmpi-bin\n",
                strerror(errno));
        _exit(2);
    }
    free(args);
    if (pid < 0) {
        fprintf(stderr, "zayac launch: fork: %s\n", strerror(errno));
        return 1;
    }
    int forwarded = 0, st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return 1;
        if (stop_signal) {
            const int sig = (int)stop_signal;
            stop_signal = 0;
            fprintf(stderr,
                    forwarded ? "zayac launch: second signal: killing mpirun\n"
                              : "zayac launch: signal %d: passing it to the ranks, which save and "
                                "stop (a second signal kills them)\n",
                    sig);
            if (forwarded)
                kill(pid, SIGKILL);
            else
                signal_children(pid, sig);
            forwarded = 1;
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int cmd_launch(int argc, char **argv) {
    dist_launch_opts o;
    memset(&o, 0, sizeof o);
    o.grace_s = 5;
    o.log = stderr;
    o.stop_signal = &stop_signal;
    int i = 1, cpu = 0;
    long v;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (a[0] != '-') break; /* the command starts here */
        if (!strcmp(a, "--cpu")) {
            cpu = 1;
            continue;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int rc;
        if (!strcmp(a, "-n") || !strcmp(a, "--nprocs")) {
            rc = parse_int(a, val, 1, 4096, &v);
            o.nprocs = (int)v;
        } else if (!strcmp(a, "--nnodes")) {
            rc = parse_int(a, val, 1, 65536, &v);
            o.nnodes = (int)v;
        } else if (!strcmp(a, "--node-rank")) {
            rc = parse_int(a, val, 0, 65535, &v);
            o.node_rank = (int)v;
        } else if (!strcmp(a, "--port") || !strcmp(a, "--master-port")) {
            rc = parse_int(a, val, 1, 65535, &v);
            o.master_port = (int)v;
        } else if (!strcmp(a, "--grace")) {
            rc = parse_int(a, val, 1, 3600, &v);
            o.grace_s = (double)v;
        } else if (!strcmp(a, "--addr") || !strcmp(a, "--master-addr")) {
            rc = val ? ZY_OK : zy_fail("--addr needs a value");
            o.master_addr = val;
        } else {
            rc = zy_fail("unknown option '%s'", a);
        }
        if (rc != ZY_OK) {
            fprintf(stderr, "zayac launch: %s\n", zy_errmsg());
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (o.nprocs < 1 || i >= argc) {
        fprintf(stderr, "zayac launch: %s\n",
                o.nprocs < 1 ? "-n N (the number of ranks) is required" : "no command to run");
        usage(stderr);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (cpu) return launch_mpi(o.nprocs, argv + i);
    int code;
    if (dist_launch(&o, argv + i, &code) != ZY_OK) return cli_error("launch");
    return code; /* the first failed rank's status, so a supervisor sees what the rank said */
}
