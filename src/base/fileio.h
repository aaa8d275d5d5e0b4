/* Files: whole-file reads, read-only mmaps, atomic writes (temporary file, fsync, rename) and
 * directory helpers. Every failure names the path and the reason. A file that cannot be found or
 * a path that names the wrong kind of thing is bad input (zy_fail); a failed read, write, fsync,
 * rename, mkdir or removal (no space, an I/O error) is a runtime failure (zy_fail_runtime). */
#ifndef ZY_FILEIO_H
#define ZY_FILEIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    void *data;  /* mapped bytes (read-only) */
    size_t size; /* bytes */
} zy_mmap;

/* Maps a whole file read-only; an empty file maps to data=NULL, size=0. */
int zy_mmap_open(zy_mmap *m, const char *path);
void zy_mmap_close(zy_mmap *m);

/* Reads a whole file into a NUL-terminated heap buffer (*out, *len without the NUL). */
int zy_read_file(const char *path, char **out, size_t *len);
/* A file written in pieces that appears at its path complete or not at all. */
typedef struct {
    int fd;
    char path[4096]; /* final name */
    char tmp[4200];  /* path.tmp.<pid>, written first */
} zy_atomic_file;

/* Creates path.tmp.<pid> for writing. */
int zy_atomic_open(zy_atomic_file *f, const char *path);
/* Appends n bytes; on failure the file is aborted (removed) and the error names it. */
int zy_atomic_write(zy_atomic_file *f, const void *data, size_t n);
/* fsync, close, rename over the final path, fsync the directory; aborts on failure. */
int zy_atomic_commit(zy_atomic_file *f);
/* Closes and removes the temporary file (safe after a failed write/commit). */
void zy_atomic_abort(zy_atomic_file *f);
/* Writes a file atomically: path.tmp.<pid>, fsync, rename over path, fsync the directory. */
int zy_write_file_atomic(const char *path, const void *data, size_t len);
/* fsyncs a file or directory by path. */
int zy_fsync_path(const char *path);
/* Creates a directory and its parents (like mkdir -p). */
int zy_mkdirs(const char *path);
/* 1 if the path exists, else 0. */
int zy_path_exists(const char *path);
/* Removes a directory tree (like rm -rf); missing is not an error. */
int zy_remove_tree(const char *path);
/* Records "path: what: <errno text>" as bad input when e says the path itself cannot be used (a
 * missing parent, a file where a directory should be: ENOENT, ENOTDIR, EISDIR, ENAMETOOLONG) and
 * otherwise (no space, an I/O error, a read-only file system) as a runtime failure; ZY_ERR. */
int zy_fail_errno(const char *path, const char *what, int e);
/* Joins a directory and a name into buf (size n); fails if it does not fit. */
int zy_path_join(char *buf, size_t n, const char *dir, const char *name);

#endif
