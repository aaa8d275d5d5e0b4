/* TCP rendezvous and control channel (see rdv.h). Messages are framed as
 * {magic, operation number, payload length} + payload, big-endian, so a rank that is at a
 * different operation than rank 0 is reported instead of misreading bytes. */
#include "dist/rdv.h"
#include "base/err.h"
#include "base/timer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RDV_MAGIC_HELLO 0x5a595256u /* "ZYRV" */
#define RDV_MAGIC_FRAME 0x5a594f50u /* "ZYOP" */
#define RDV_VERSION     1u
#define RDV_MAX_PAYLOAD (64u << 20)

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int ms_left(double deadline) {
    double left = deadline - zy_now();
    if (left <= 0) return 0;
    return left > 1e6 ? 1000000000 : (int)(left * 1000.0) + 1;
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Writes len bytes before the deadline; `who` names the peer in errors. */
static int write_full(int fd, const void *buf, size_t len, double deadline, const char *who) {
    const char *p = buf;
    while (len > 0) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int t = ms_left(deadline);
        if (t == 0) return zy_fail_runtime("timed out sending to %s", who);
        int pr = poll(&pf, 1, t);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return zy_fail_runtime("poll while sending to %s: %s", who, strerror(errno));
        if (pr == 0) continue;
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n < 0)
            return zy_fail_runtime("%s closed its connection (the process exited or crashed): %s",
                                   who, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return ZY_OK;
}

/* Reads exactly len bytes before the deadline. */
static int read_full(int fd, void *buf, size_t len, double deadline, double timeout_s,
                     const char *who) {
    char *p = buf;
    while (len > 0) {
        struct pollfd pf = {fd, POLLIN, 0};
        int t = ms_left(deadline);
        if (t == 0) return zy_fail_runtime("timed out after %.0f s waiting for %s", timeout_s, who);
        int pr = poll(&pf, 1, t);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return zy_fail_runtime("poll while waiting for %s: %s", who, strerror(errno));
        if (pr == 0) continue;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n == 0 || n < 0)
            return zy_fail_runtime("%s closed its connection (the process exited or crashed)%s%s",
                                   who, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
        p += n;
        len -= (size_t)n;
    }
    return ZY_OK;
}

static void peer_name(char *buf, size_t n, int rank) {
    snprintf(buf, n, "rank %d", rank);
}

static void tune_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Rank 0: binds and listens on every interface of addr's family at port. */
static int rdv_listen(const char *addr, int port, int backlog, int *out_fd) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    int family = AF_INET;
    if (getaddrinfo(addr, NULL, &hints, &res) == 0 && res) family = res->ai_family;
    if (res) freeaddrinfo(res);
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return zy_fail_runtime("rendezvous: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (family == AF_INET6) {
        struct sockaddr_in6 sa = {0};
        sa.sin6_family = AF_INET6;
        sa.sin6_addr = in6addr_any;
        sa.sin6_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    } else {
        struct sockaddr_in sa = {0};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        sa.sin_port = htons((uint16_t)port);
        rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    }
    if (rc != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        return zy_fail_runtime(
            "rendezvous: rank 0 cannot listen on port %d: %s (is MASTER_PORT in use by "
            "another job?)",
            port, strerror(e));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *out_fd = fd;
    return ZY_OK;
}

/* One connect attempt to addr:port, bounded by wait_ms; returns the socket or -1 (errno set). */
static int try_connect(const char *addr, int port, int wait_ms, int *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(addr, ps, &hints, &res);
    if (g != 0) {
        *err = -g; /* negative: a resolver error */
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM, 0);
        if (fd < 0) continue;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pf = {fd, POLLOUT, 0};
            rc = poll(&pf, 1, wait_ms) == 1 ? 0 : -1;
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr) {
                errno = soerr;
                rc = -1;
            } else if (rc != 0) {
                errno = ETIMEDOUT;
            }
        }
        if (rc != 0) {
            *err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static void close_all(dist_rdv *r) {
    if (!r->fds) return;
    int n = r->rank == 0 ? r->world : 1;
    for (int i = 0; i < n; i++)
        if (r->fds[i] >= 0) close(r->fds[i]);
    free(r->fds);
    r->fds = NULL;
}

static int serve(dist_rdv *r, const char *addr, int port) {
    int lfd = -1;
    ZY_TRY(rdv_listen(addr, port, r->world, &lfd));
    double deadline = zy_now() + r->timeout_s;
    int arrived = 0, rc = ZY_OK;
    while (arrived < r->world - 1) {
        struct pollfd pf = {lfd, POLLIN, 0};
        int t = ms_left(deadline);
        if (t == 0) {
            char missing[256] = "";
            size_t len = 0;
            for (int q = 1; q < r->world && len + 16 < sizeof missing; q++)
                if (r->fds[q] < 0)
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                            len ? ", " : "", q);
            rc = zy_fail_runtime("rendezvous at %s: %d of %d ranks arrived within %.0f s; missing "
                                 "rank(s) %s",
                                 r->where, arrived + 1, r->world, r->timeout_s, missing);
            break;
        }
        int pr = poll(&pf, 1, t);
        if (pr <= 0) continue;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) continue;
        tune_socket(fd);
        unsigned char h[16];
        double hd = zy_now() + 10.0 < deadline ? zy_now() + 10.0 : deadline;
        if (read_full(fd, h, sizeof h, hd, 10.0, "a connecting peer") != ZY_OK ||
            get_u32(h) != RDV_MAGIC_HELLO) {
            close(fd); /* a stray connection (a port scan, another program): ignore it */
            zy_err_clear();
            continue;
        }
        uint32_t ver = get_u32(h + 4);
        int prank = (int)get_u32(h + 8), pworld = (int)get_u32(h + 12);
        if (ver != RDV_VERSION) {
            close(fd);
            rc = zy_fail("rendezvous at %s: rank %d speaks protocol %u, rank 0 speaks %u (mixed "
                         "zayac versions?)",
                         r->where, prank, ver, RDV_VERSION);
            break;
        }
        if (pworld != r->world) {
            close(fd);
            rc = zy_fail("rendezvous at %s: rank %d says the world size is %d, rank 0 says %d",
                         r->where, prank, pworld, r->world);
            break;
        }
        if (prank <= 0 || prank >= r->world) {
            close(fd);
            rc = zy_fail("rendezvous at %s: a peer claims rank %d, expected 1..%d", r->where, prank,
                         r->world - 1);
            break;
        }
        if (r->fds[prank] >= 0) {
            close(fd);
            rc = zy_fail("rendezvous at %s: two processes claim rank %d", r->where, prank);
            break;
        }
        r->fds[prank] = fd;
        arrived++;
    }
    close(lfd);
    if (rc != ZY_OK) return rc;
    unsigned char w[8];
    put_u32(w, RDV_MAGIC_HELLO);
    put_u32(w + 4, (uint32_t)r->world);
    for (int q = 1; q < r->world; q++) {
        char who[32];
        peer_name(who, sizeof who, q);
        ZY_TRY(write_full(r->fds[q], w, sizeof w, zy_now() + r->timeout_s, who));
    }
    return ZY_OK;
}

static int join(dist_rdv *r, const char *addr, int port) {
    double deadline = zy_now() + r->timeout_s;
    int fd = -1, err = 0;
    while (fd < 0) {
        int t = ms_left(deadline);
        if (t == 0) {
            return zy_fail_runtime(
                "rendezvous: rank %d could not reach rank 0 at %s within %.0f s (%s)", r->rank,
                r->where, r->timeout_s, err < 0 ? gai_strerror(-err) : strerror(err));
        }
        fd = try_connect(addr, port, t < 1000 ? t : 1000, &err);
        if (fd < 0) sleep_ms(ms_left(deadline) < 100 ? 10 : 100);
    }
    tune_socket(fd);
    r->fds[0] = fd;
    unsigned char h[16];
    put_u32(h, RDV_MAGIC_HELLO);
    put_u32(h + 4, RDV_VERSION);
    put_u32(h + 8, (uint32_t)r->rank);
    put_u32(h + 12, (uint32_t)r->world);
    ZY_TRY(write_full(fd, h, sizeof h, deadline, "rank 0"));
    unsigned char w[8];
    if (read_full(fd, w, sizeof w, zy_now() + r->timeout_s, r->timeout_s,
                  "rank 0 to start the job (the other ranks to arrive)") != ZY_OK)
        return zy_fail_ctx("rendezvous at %s: rank %d", r->where, r->rank);
    if (get_u32(w) != RDV_MAGIC_HELLO || (int)get_u32(w + 4) != r->world)
        return zy_fail("rendezvous at %s: rank 0 answered with something unexpected (another "
                       "program on this port?)",
                       r->where);
    return ZY_OK;
}

int dist_rdv_init(dist_rdv *r, int rank, int world, const char *addr, int port, double timeout_s) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->world = world;
    r->timeout_s = timeout_s > 0 ? timeout_s : 1;
    if (world < 1 || rank < 0 || rank >= world)
        return zy_fail("rendezvous: rank %d does not fit world size %d", rank, world);
    if (port < 1 || port > 65535) return zy_fail("rendezvous: port %d is not a TCP port", port);
    if (world > 1) zy_err_set_rank(rank); /* fatal messages of this thread name the rank */
    snprintf(r->where, sizeof r->where, "%s:%d", addr, port);
    if (world == 1) return ZY_OK;
    int n = rank == 0 ? world : 1;
    r->fds = zy_malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) r->fds[i] = -1;
    int rc = rank == 0 ? serve(r, addr, port) : join(r, addr, port);
    if (rc != ZY_OK) close_all(r);
    return rc;
}

void dist_rdv_free(dist_rdv *r) {
    close_all(r);
}

/* Sends one frame (this operation's number, payload) to fd. */
static int send_frame(dist_rdv *r, int fd, const void *buf, size_t len, int peer) {
    unsigned char h[12];
    put_u32(h, RDV_MAGIC_FRAME);
    put_u32(h + 4, r->seq);
    put_u32(h + 8, (uint32_t)len);
    char who[32];
    peer_name(who, sizeof who, peer);
    double deadline = zy_now() + r->timeout_s;
    ZY_TRY(write_full(fd, h, sizeof h, deadline, who));
    return write_full(fd, buf, len, deadline, who);
}

/* Receives one frame of exactly len bytes for this operation from fd. */
static int recv_frame(dist_rdv *r, int fd, void *buf, size_t len, int peer) {
    unsigned char h[12];
    char who[32];
    peer_name(who, sizeof who, peer);
    double deadline = zy_now() + r->timeout_s;
    ZY_TRY(read_full(fd, h, sizeof h, deadline, r->timeout_s, who));
    if (get_u32(h) != RDV_MAGIC_FRAME)
        return zy_fail_runtime("control channel: garbage from %s (not a zayac control message)",
                               who);
    if (get_u32(h + 4) != r->seq)
        return zy_fail("control channel: %s is at operation %u, rank %d at %u (the ranks run "
                       "different commands or options?)",
                       who, get_u32(h + 4), r->rank, r->seq);
    if (get_u32(h + 8) != len)
        return zy_fail("control channel: %s sent %u bytes, expected %zu (the ranks run different "
                       "options?)",
                       who, get_u32(h + 8), len);
    return read_full(fd, buf, len, deadline, r->timeout_s, who);
}

int dist_rdv_bcast(dist_rdv *r, void *buf, size_t len) {
    if (r->world == 1) return ZY_OK;
    if (len > RDV_MAX_PAYLOAD) return zy_fail("control channel: %zu bytes is too large", len);
    int rc = ZY_OK;
    if (r->rank == 0) {
        for (int q = 1; q < r->world && rc == ZY_OK; q++)
            rc = send_frame(r, r->fds[q], buf, len, q);
    } else {
        rc = recv_frame(r, r->fds[0], buf, len, 0);
    }
    r->seq++;
    return rc;
}

int dist_rdv_allgather(dist_rdv *r, const void *mine, size_t len, void *all) {
    memmove((char *)all + (size_t)r->rank * len, mine, len);
    if (r->world == 1) return ZY_OK;
    if (len * (size_t)r->world > RDV_MAX_PAYLOAD)
        return zy_fail("control channel: %zu bytes is too large", len * (size_t)r->world);
    int rc = ZY_OK;
    if (r->rank == 0) {
        for (int q = 1; q < r->world && rc == ZY_OK; q++)
            rc = recv_frame(r, r->fds[q], (char *)all + (size_t)q * len, len, q);
        for (int q = 1; q < r->world && rc == ZY_OK; q++)
            rc = send_frame(r, r->fds[q], all, len * (size_t)r->world, q);
    } else {
        rc = send_frame(r, r->fds[0], (const char *)all + (size_t)r->rank * len, len, 0);
        if (rc == ZY_OK) rc = recv_frame(r, r->fds[0], all, len * (size_t)r->world, 0);
    }
    r->seq++;
    return rc;
}

int dist_rdv_barrier(dist_rdv *r) {
    unsigned char one = 1, *all = zy_malloc((size_t)r->world);
    int rc = dist_rdv_allgather(r, &one, 1, all);
    free(all);
    return rc;
}

int dist_rdv_allreduce_f64(dist_rdv *r, double *v, int n, dist_op op) {
    double *all = zy_malloc(sizeof(double) * (size_t)n * (size_t)r->world);
    int rc = dist_rdv_allgather(r, v, sizeof(double) * (size_t)n, all);
    if (rc == ZY_OK) {
        for (int i = 0; i < n; i++) {
            double acc = all[i]; /* rank order: identical on every rank */
            for (int q = 1; q < r->world; q++) {
                double x = all[(size_t)q * n + i];
                acc = op == DIST_OP_SUM   ? acc + x
                      : op == DIST_OP_MAX ? (x > acc ? x : acc)
                                          : (x < acc ? x : acc);
            }
            v[i] = acc;
        }
    }
    free(all);
    return rc;
}

int dist_rdv_allreduce_u64(dist_rdv *r, uint64_t *v, int n, dist_op op) {
    uint64_t *all = zy_malloc(sizeof(uint64_t) * (size_t)n * (size_t)r->world);
    int rc = dist_rdv_allgather(r, v, sizeof(uint64_t) * (size_t)n, all);
    if (rc == ZY_OK) {
        for (int i = 0; i < n; i++) {
            uint64_t acc = all[i];
            for (int q = 1; q < r->world; q++) {
                uint64_t x = all[(size_t)q * n + i];
                acc = op == DIST_OP_SUM   ? acc + x
                      : op == DIST_OP_MAX ? (x > acc ? x : acc)
                                          : (x < acc ? x : acc);
            }
            v[i] = acc;
        }
    }
    free(all);
    return rc;
}

int dist_rdv_check_peers(dist_rdv *r) {
    if (r->world == 1 || !r->fds) return ZY_OK;
    int n = r->rank == 0 ? r->world : 1;
    for (int i = 0; i < n; i++) {
        int fd = r->fds[i];
        if (fd < 0) continue;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 0) <= 0) continue;
        int dead = (pf.revents & (POLLERR | POLLNVAL)) != 0;
        if (!dead && (pf.revents & (POLLIN | POLLHUP))) {
            char c;
            ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
            dead = k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (dead)
            return zy_fail_runtime(
                "rank %d closed its connection to rank %d (the process exited or "
                "crashed)",
                r->rank == 0 ? i : 0, r->rank);
    }
    return ZY_OK;
}
