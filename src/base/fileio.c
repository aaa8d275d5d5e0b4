/* File helpers (see fileio.h). */
#include "base/fileio.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int zy_fail_errno(const char *path, const char *what, int e) {
    if (e == ENOTDIR || e == ENOENT || e == EISDIR || e == ENAMETOOLONG)
        return zy_fail("%s: %s: %s", path, what, strerror(e));
    return zy_fail_runtime("%s: %s: %s", path, what, strerror(e));
}

int zy_mmap_open(zy_mmap *m, const char *path) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zy_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return zy_fail("%s: cannot stat: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return zy_fail("%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return zy_fail_runtime("%s: cannot mmap: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return ZY_OK;
}

void zy_mmap_close(zy_mmap *m) {
    if (m->data) munmap(m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int zy_read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return zy_fail("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = zy_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = zy_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return zy_fail_runtime("%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return ZY_OK;
}

int zy_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zy_fail_runtime("%s: cannot open for fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL)
        return zy_fail_runtime("%s: fsync failed: %s", path, strerror(errno));
    return ZY_OK;
}

static void parent_dir(const char *path, char *dir, size_t n) {
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
}

int zy_atomic_open(zy_atomic_file *f, const char *path) {
    f->fd = -1;
    if ((size_t)snprintf(f->path, sizeof f->path, "%s", path) >= sizeof f->path)
        return zy_fail("%s: path too long", path);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%d", path, (int)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f->fd < 0) return zy_fail_errno(f->tmp, "cannot create", errno);
    return ZY_OK;
}

void zy_atomic_abort(zy_atomic_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->fd != -2) unlink(f->tmp); /* -2: already renamed into place */
    f->fd = -1;
}

int zy_atomic_write(zy_atomic_file *f, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            zy_atomic_abort(f);
            return zy_fail_runtime("%s: write failed: %s", f->tmp, strerror(e));
        }
        p += w;
        n -= (size_t)w;
    }
    return ZY_OK;
}

int zy_atomic_commit(zy_atomic_file *f) {
    if (fsync(f->fd) != 0) {
        int e = errno;
        zy_atomic_abort(f);
        return zy_fail_runtime("%s: fsync failed: %s", f->tmp, strerror(e));
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        int e = errno;
        zy_atomic_abort(f);
        return zy_fail_runtime("%s: close failed: %s", f->tmp, strerror(e));
    }
    if (rename(f->tmp, f->path) != 0) {
        int e = errno;
        zy_atomic_abort(f);
        return zy_fail_runtime("%s: rename failed: %s", f->path, strerror(e));
    }
    f->fd = -2;
    char dir[4096];
    parent_dir(f->path, dir, sizeof dir);
    return zy_fsync_path(dir);
}

int zy_write_file_atomic(const char *path, const void *data, size_t len) {
    zy_atomic_file f;
    ZY_TRY(zy_atomic_open(&f, path));
    ZY_TRY(zy_atomic_write(&f, data, len));
    return zy_atomic_commit(&f);
}

int zy_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return zy_fail("%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return zy_fail_errno(buf, "cannot create directory", errno);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return zy_fail_errno(buf, "cannot create directory", errno);
    struct stat st; /* EEXIST also covers a plain file of that name */
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return zy_fail("%s: exists and is not a directory", buf);
    return ZY_OK;
}

int zy_path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int zy_remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? ZY_OK : zy_fail_runtime("%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return zy_fail_runtime("%s: cannot open directory: %s", path, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char child[4096];
            if (zy_path_join(child, sizeof child, path, e->d_name) != ZY_OK ||
                zy_remove_tree(child) != ZY_OK) {
                closedir(d);
                return ZY_ERR;
            }
        }
        closedir(d);
        if (rmdir(path) != 0)
            return zy_fail_runtime("%s: cannot remove: %s", path, strerror(errno));
        return ZY_OK;
    }
    if (unlink(path) != 0) return zy_fail_runtime("%s: cannot remove: %s", path, strerror(errno));
    return ZY_OK;
}

int zy_path_join(char *buf, size_t n, const char *dir, const char *name) {
    if ((size_t)snprintf(buf, n, "%s/%s", dir, name) >= n)
        return zy_fail("%s/%s: path too long", dir, name);
    return ZY_OK;
}
