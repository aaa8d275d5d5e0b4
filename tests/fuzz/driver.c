/* A small deterministic fuzzer for the targets in tests/fuzz/ (no libFuzzer or clang needed).
 *
 *   fuzz_<parser> [--seconds S] [--runs N] [--seed K] [--crashes DIR] CORPUS...
 *   fuzz_<parser> --replay FILE...
 *
 * Input k is a function of (seed, k) alone: inputs 0..n-1 are the n seed files (CORPUS: files or
 * folders of them) as they are, every later one a seed file put through 1-4 mutations drawn from
 * an RNG keyed by (seed, k): bit flips, interesting bytes and integers, truncation, inserted,
 * deleted and duplicated ranges, splices with another seed, numbers in text replaced by edge
 * values. So a finding is reproduced by its index, and a run that stops at a time limit has run a
 * prefix of the same sequence as any other run with that seed.
 * Inputs run in a forked child; a child that dies (sanitizer report, signal, abort, exit, or an
 * input running over 10 s) is a crash: the parent saves that input as DIR/crash-<k>, names the
 * first line of the report, and starts a new child at input k+1. Prints the number of inputs and
 * crashes (and distinct reports); exits 1 when any input crashed. */
#include "fuzz.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_INPUT_BYTES (1u << 20) /* mutations never grow an input past 1 MiB */
#define INPUT_TIMEOUT   10         /* seconds one input may take */
#define MAX_SIGNATURES  64

typedef struct {
    uint8_t *data;
    size_t size;
    char *name;
} seed_file;

static seed_file *seeds;
static int nseeds;

/* ---- the corpus ---- */

static void add_seed(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    if (n > MAX_INPUT_BYTES) n = MAX_INPUT_BYTES;
    seeds = realloc(seeds, (size_t)(nseeds + 1) * sizeof *seeds);
    if (!seeds) abort();
    seeds[nseeds++] = (seed_file){buf, n, strdup(path)};
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file, or every regular file of a folder in name order (so the seed indices are stable). */
static void add_corpus(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        add_seed(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names || !names[n]) abort();
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) add_seed(names[i]);
        free(names[i]);
    }
    free(names);
}

/* ---- deterministic mutations ---- */

typedef struct {
    uint64_t s;
} rng;

static uint64_t next_u64(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static size_t below(rng *r, size_t n) {
    return n ? (size_t)(next_u64(r) % n) : 0;
}

typedef struct {
    uint8_t *b;
    size_t n;
} buffer;

static void insert_bytes(buffer *x, size_t at, const uint8_t *src, size_t k) {
    if (x->n + k > MAX_INPUT_BYTES) k = MAX_INPUT_BYTES - x->n;
    memmove(x->b + at + k, x->b + at, x->n - at);
    memcpy(x->b + at, src, k);
    x->n += k;
}

static const uint8_t interesting_bytes[] = {0,   1,   0x7f, 0x80, 0xff, '0', '9', '-',  '.', 'e',
                                            '"', '{', '}',  '[',  ']',  ',', ':', '\\', ' ', '\n'};
static const uint64_t interesting_ints[] = {0,
                                            1,
                                            2,
                                            0x7f,
                                            0x80,
                                            0xff,
                                            0x7fff,
                                            0xffff,
                                            0x10000,
                                            0x7fffffff,
                                            0x80000000,
                                            0xffffffff,
                                            0x100000001ULL,
                                            0x7fffffffffffffffULL,
                                            0x8000000000000000ULL,
                                            0xffffffffffffffffULL};
static const char *const interesting_numbers[] = {"-1",
                                                  "0",
                                                  "1",
                                                  "2147483647",
                                                  "2147483648",
                                                  "4294967297",
                                                  "-2147483649",
                                                  "1e308",
                                                  "9223372036854775807",
                                                  "18446744073709551616",
                                                  "65536",
                                                  "1073741824",
                                                  "1048576",
                                                  "0.5",
                                                  "-0",
                                                  "1e-400",
                                                  "NaN",
                                                  "Infinity",
                                                  "99999999999999999999",
                                                  "16777216"};

static int is_digit(uint8_t c) {
    return c >= '0' && c <= '9';
}

static void mutate_once(buffer *x, rng *r) {
    size_t n = x->n;
    switch (below(r, 9)) {
    case 0: /* flip bits */
        if (n)
            for (size_t k = 1 + below(r, 4); k; k--)
                x->b[below(r, n)] ^= (uint8_t)(1u << below(r, 8));
        break;
    case 1: /* an interesting byte */
        if (n) x->b[below(r, n)] = interesting_bytes[below(r, sizeof interesting_bytes)];
        break;
    case 2: /* truncate */
        x->n = below(r, n + 1);
        break;
    case 3: { /* insert random bytes */
        uint8_t tmp[16];
        size_t k = 1 + below(r, sizeof tmp);
        for (size_t i = 0; i < k; i++) tmp[i] = (uint8_t)next_u64(r);
        insert_bytes(x, below(r, n + 1), tmp, k);
        break;
    }
    case 4: /* delete a range */
        if (n) {
            size_t at = below(r, n), k = 1 + below(r, n - at < 64 ? n - at : 64);
            memmove(x->b + at, x->b + at + k, n - at - k);
            x->n -= k;
        }
        break;
    case 5: /* duplicate a range somewhere else */
        if (n) {
            size_t at = below(r, n), k = 1 + below(r, n - at < 256 ? n - at : 256);
            uint8_t tmp[256];
            memcpy(tmp, x->b + at, k);
            insert_bytes(x, below(r, n + 1), tmp, k);
        }
        break;
    case 6: { /* splice: this input's head, another seed's tail */
        const seed_file *o = &seeds[below(r, (size_t)nseeds)];
        size_t cut = below(r, n + 1), from = below(r, o->size + 1);
        size_t k = o->size - from;
        if (cut + k > MAX_INPUT_BYTES) k = MAX_INPUT_BYTES - cut;
        memcpy(x->b + cut, o->data + from, k);
        x->n = cut + k;
        break;
    }
    case 7: { /* a number in text becomes an edge value */
        if (!n) break;
        size_t at = below(r, n), end;
        while (at < n && !is_digit(x->b[at])) at++;
        if (at == n) break;
        while (at > 0 && (is_digit(x->b[at - 1]) || x->b[at - 1] == '-')) at--;
        for (end = at; end < n && (is_digit(x->b[end]) || strchr("-.eE+", x->b[end])); end++) {
        }
        const char *v = interesting_numbers[below(r, sizeof interesting_numbers / sizeof(char *))];
        memmove(x->b + at, x->b + end, n - end);
        x->n -= end - at;
        insert_bytes(x, at, (const uint8_t *)v, strlen(v));
        break;
    }
    default: { /* a binary integer of 1, 2, 4 or 8 bytes (little-endian) */
        size_t w = (size_t)1 << below(r, 4);
        if (n < w) break;
        uint64_t v = interesting_ints[below(r, sizeof interesting_ints / sizeof(uint64_t))];
        if (below(r, 2)) v = v + 1 - 2 * below(r, 2); /* and its neighbours */
        size_t at = below(r, n - w + 1);
        for (size_t i = 0; i < w; i++) x->b[at + i] = (uint8_t)(v >> (8 * i));
        break;
    }
    }
}

/* Input k of the sequence of `seed` into x. */
static void make_input(buffer *x, uint64_t seed, uint64_t k) {
    if (k < (uint64_t)nseeds) {
        x->n = seeds[k].size;
        memcpy(x->b, seeds[k].data, x->n);
        return;
    }
    rng r = {seed * 0x9e3779b97f4a7c15ULL ^ (k * 0xd1b54a32d192ed03ULL)};
    const seed_file *s = &seeds[below(&r, (size_t)nseeds)];
    x->n = s->size;
    memcpy(x->b, s->data, x->n);
    for (size_t m = 1 + below(&r, 4); m; m--) mutate_once(x, &r);
}

/* ---- running ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    volatile uint64_t next; /* the input the child is running (or would run next) */
} shared_state;

/* The child: inputs [first, limit) until the deadline; exits 0 when it gets there. */
static void run_child(shared_state *sh, uint64_t seed, uint64_t first, uint64_t limit,
                      double deadline, const char *errfile) {
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        close(null);
    }
    buffer x = {malloc(MAX_INPUT_BYTES), 0};
    if (!x.b) abort();
    uint64_t k = first;
    for (; k < limit; k++) {
        if ((k - first) % 16 == 0 && now_s() > deadline) break;
        sh->next = k;
        make_input(&x, seed, k);
        alarm(INPUT_TIMEOUT);
        LLVMFuzzerTestOneInput(x.b, x.n);
    }
    alarm(0);
    sh->next = k;
    free(x.b);
    char scratch[512];
    snprintf(scratch, sizeof scratch, "%s/zayac-fuzz-%d.in", fuzz_scratch_dir(), (int)getpid());
    unlink(scratch);
    _exit(0); /* no leak check at exit: the targets' state is per input */
}

/* The line of the child's report that says what happened ("" when none): a sanitizer's
 * SUMMARY, a UBSan runtime error, a failed check (ZY_CHECK), in that preference. */
static void crash_report(const char *errfile, char *out, size_t n) {
    static const char *const marks[] = {"SUMMARY: ", "runtime error:", "fatal at ", "ERROR: "};
    out[0] = 0;
    FILE *f = fopen(errfile, "r");
    if (!f) return;
    char line[1024];
    int best = 99;
    while (fgets(line, sizeof line, f)) {
        for (int m = 0; m < 4 && m < best; m++) {
            if (!strstr(line, marks[m])) continue;
            line[strcspn(line, "\n")] = 0;
            snprintf(out, n, "%s", line);
            best = m;
        }
    }
    fclose(f);
}

/* What makes two crashes the same bug: the report without its values (a UBSan error's
 * file:line:col and kind, a check's file:line, a sanitizer's summary line). */
static void crash_place(const char *report, char *out, size_t n) {
    const char *ub = strstr(report, ": runtime error:"), *fatal = strstr(report, "fatal at ");
    if (ub) {
        snprintf(out, n, "%.*s", (int)(ub - report), report);
    } else if (fatal) { /* "fatal at src/x.c:12: ..." -> "src/x.c:12" */
        const char *at = fatal + strlen("fatal at ");
        size_t len = strcspn(at, " ");
        if (len && at[len - 1] == ':') len--;
        snprintf(out, n, "%.*s", (int)len, at);
    } else {
        snprintf(out, n, "%s", report);
    }
}

static void save_input(const char *dir, uint64_t seed, uint64_t k, char *path, size_t n) {
    buffer x = {malloc(MAX_INPUT_BYTES), 0};
    if (!x.b) abort();
    make_input(&x, seed, k);
    char parent[512];
    snprintf(parent, sizeof parent, "%s", dir);
    for (char *p = parent + 1; *p; p++) /* mkdir -p */
        if (*p == '/') {
            *p = 0;
            mkdir(parent, 0755);
            *p = '/';
        }
    mkdir(parent, 0755);
    snprintf(path, n, "%s/crash-%llu", dir, (unsigned long long)k);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(x.b, 1, x.n, f);
        fclose(f);
    } else {
        snprintf(path, n, "(not saved: %s: %s)", dir, strerror(errno));
    }
    free(x.b);
}

static int replay(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        nseeds = 0;
        add_seed(argv[i]);
        fprintf(stderr, "replaying %s (%zu bytes)\n", argv[i], seeds[0].size);
        LLVMFuzzerTestOneInput(seeds[0].data, seeds[0].size);
    }
    fprintf(stderr, "%d input(s) ran without a crash\n", argc);
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: fuzz_X [--seconds S] [--runs N] [--seed K] [--crashes DIR] CORPUS...\n"
                    "       fuzz_X --replay FILE...\n");
    exit(2);
}

int main(int argc, char **argv) {
    double seconds = 10;
    uint64_t runs = UINT64_MAX, seed = 1;
    const char *crash_dir = "/tmp/zayac-fuzz-crashes";
    int i = 1;
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc > 1 && !strcmp(argv[1], "--replay")) return replay(argc - 2, argv + 2);
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
        if (i + 1 >= argc) usage();
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--runs"))
            runs = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--crashes"))
            crash_dir = argv[i + 1];
        else
            usage();
    }
    if (i == argc) usage();
    for (; i < argc; i++) add_corpus(argv[i]);
    if (nseeds == 0) {
        fprintf(stderr, "%s: the corpus has no files\n", name);
        return 2;
    }
    shared_state *sh =
        mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) abort();
    char errfile[512];
    snprintf(errfile, sizeof errfile, "%s/zayac-fuzz-%d.err", fuzz_scratch_dir(), (int)getpid());
    const double start = now_s(), deadline = start + seconds;
    uint64_t k = 0, crashes = 0;
    char sigs[MAX_SIGNATURES][1024];
    int nsigs = 0;
    while (k < runs && now_s() < deadline) {
        sh->next = k;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) run_child(sh, seed, k, runs, deadline, errfile);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        uint64_t at = sh->next;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            k = at;
            break;
        }
        char path[600], report[1024], sig[1024], what[64];
        save_input(crash_dir, seed, at, path, sizeof path);
        crash_report(errfile, report, sizeof report);
        crash_place(report, sig, sizeof sig);
        if (WIFSIGNALED(status))
            snprintf(what, sizeof what, "signal %d%s", WTERMSIG(status),
                     WTERMSIG(status) == SIGALRM ? " (over the time limit)" : "");
        else
            snprintf(what, sizeof what, "exit %d", WEXITSTATUS(status));
        int known = 0;
        for (int s = 0; s < nsigs; s++) known |= !strcmp(sigs[s], sig);
        if (!known && nsigs < MAX_SIGNATURES) snprintf(sigs[nsigs++], sizeof sigs[0], "%s", sig);
        crashes++;
        printf("%s: CRASH at input #%llu (%s): %s\n  input saved as %s\n", name,
               (unsigned long long)at, what, report[0] ? report : "(no report)", path);
        char scratch[512];
        snprintf(scratch, sizeof scratch, "%s/zayac-fuzz-%d.in", fuzz_scratch_dir(), (int)pid);
        unlink(scratch);
        k = at + 1;
    }
    unlink(errfile);
    printf("%s: %llu inputs (%d seed files, seed %llu) in %.1f s: %llu crashes, %d distinct\n",
           name, (unsigned long long)k, nseeds, (unsigned long long)seed, now_s() - start,
           (unsigned long long)crashes, nsigs);
    return crashes ? 1 : 0;
}
