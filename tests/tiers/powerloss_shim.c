/* An LD_PRELOAD shim for tests/tiers/test_power_loss.py: for every file whose path starts with
 * $POWERLOSS_DIR it appends each write, truncate, sync and unlink to the trace file
 * $POWERLOSS_TRACE (after doing the real call), so that a replayer can rebuild what a power
 * loss at any point of the run would have left on disk (LazyFS/ALICE style).
 *
 * Record: char op ('C' create/open, 'W' write, 'T' truncate, 'S' sync, 'U' unlink),
 * uint32 name length, int64 offset, int64 length, the name (relative to $POWERLOSS_DIR), and
 * for 'W' the data written. Built by the test: cc -shared -fPIC -O2 -o shim.so this.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FDS 4096

static char *names[MAX_FDS];        /* traced name of each open fd, NULL when untraced */
static int trace_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define REAL(ret, fn, ...) static ret (*real_##fn)(__VA_ARGS__); \
    if (!real_##fn) real_##fn = dlsym(RTLD_NEXT, #fn)

/* The name of path under $POWERLOSS_DIR, or NULL when the path is not traced. */
static const char *traced(const char *path) {
    const char *dir = getenv("POWERLOSS_DIR");
    size_t n = dir ? strlen(dir) : 0;
    if (!path || !n || strncmp(path, dir, n) != 0 || (path[n] != '/' && path[n] != '\0'))
        return NULL;
    return path[n] == '/' ? path + n + 1 : path + n;
}

static void put_all(const void *buf, size_t len) {
    REAL(ssize_t, write, int, const void *, size_t);
    for (const char *p = buf; len > 0;) {
        ssize_t done = real_write(trace_fd, p, len);
        if (done <= 0) abort();      /* a trace with a hole would replay a wrong disk */
        p += done;
        len -= (size_t)done;
    }
}

static void record(char op, const char *name, int64_t offset, int64_t length, const void *data) {
    REAL(int, open, const char *, int, ...);
    pthread_mutex_lock(&lock);
    if (trace_fd < 0)
        trace_fd = real_open(getenv("POWERLOSS_TRACE"), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (trace_fd < 0) abort();
    uint32_t n = (uint32_t)strlen(name);
    char head[1 + 4 + 8 + 8];
    head[0] = op;
    memcpy(head + 1, &n, 4);
    memcpy(head + 5, &offset, 8);
    memcpy(head + 13, &length, 8);
    put_all(head, sizeof head);
    put_all(name, n);
    if (op == 'W') put_all(data, (size_t)length);
    pthread_mutex_unlock(&lock);
}

static const char *name_of(int fd) { return fd >= 0 && fd < MAX_FDS ? names[fd] : NULL; }

static int opened(int fd, const char *path, int flags) {
    const char *name = traced(path);
    if (fd < 0 || fd >= MAX_FDS || !name) return fd;
    free(names[fd]);
    names[fd] = strdup(name);
    record('C', name, 0, 0, NULL);
    if (flags & O_TRUNC) record('T', name, 0, 0, NULL);
    return fd;
}

#define MODE_ARG mode_t mode = 0; \
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); \
        mode = va_arg(ap, mode_t); va_end(ap); }

int open(const char *path, int flags, ...) {
    REAL(int, open, const char *, int, ...);
    MODE_ARG
    return opened(real_open(path, flags, mode), path, flags);
}

int open64(const char *path, int flags, ...) {
    REAL(int, open64, const char *, int, ...);
    MODE_ARG
    return opened(real_open64(path, flags, mode), path, flags);
}

int openat(int dirfd, const char *path, int flags, ...) {
    REAL(int, openat, int, const char *, int, ...);
    MODE_ARG
    return opened(real_openat(dirfd, path, flags, mode), path, flags);  /* absolute paths only */
}

int openat64(int dirfd, const char *path, int flags, ...) {
    REAL(int, openat64, int, const char *, int, ...);
    MODE_ARG
    return opened(real_openat64(dirfd, path, flags, mode), path, flags);
}

int close(int fd) {
    REAL(int, close, int);
    if (fd >= 0 && fd < MAX_FDS) {
        free(names[fd]);
        names[fd] = NULL;
    }
    return real_close(fd);
}

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(ssize_t, write, int, const void *, size_t);
    const char *name = name_of(fd);
    off_t at = name ? lseek(fd, 0, (fcntl(fd, F_GETFL) & O_APPEND) ? SEEK_END : SEEK_CUR) : 0;
    ssize_t done = real_write(fd, buf, count);
    if (name && done > 0) record('W', name, at, done, buf);
    return done;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
    ssize_t done = real_pwrite(fd, buf, count, offset);
    if (name_of(fd) && done > 0) record('W', name_of(fd), offset, done, buf);
    return done;
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
    ssize_t done = real_pwrite64(fd, buf, count, offset);
    if (name_of(fd) && done > 0) record('W', name_of(fd), offset, done, buf);
    return done;
}

int ftruncate(int fd, off_t length) {
    REAL(int, ftruncate, int, off_t);
    int rc = real_ftruncate(fd, length);
    if (name_of(fd) && rc == 0) record('T', name_of(fd), length, 0, NULL);
    return rc;
}

int ftruncate64(int fd, off_t length) {
    REAL(int, ftruncate64, int, off_t);
    int rc = real_ftruncate64(fd, length);
    if (name_of(fd) && rc == 0) record('T', name_of(fd), length, 0, NULL);
    return rc;
}

int fsync(int fd) {
    REAL(int, fsync, int);
    int rc = real_fsync(fd);
    if (name_of(fd) && rc == 0) record('S', name_of(fd), 0, 0, NULL);
    return rc;
}

int fdatasync(int fd) {
    REAL(int, fdatasync, int);
    int rc = real_fdatasync(fd);
    if (name_of(fd) && rc == 0) record('S', name_of(fd), 0, 0, NULL);
    return rc;
}

int unlink(const char *path) {
    REAL(int, unlink, const char *);
    int rc = real_unlink(path);
    if (traced(path) && rc == 0) record('U', traced(path), 0, 0, NULL);
    return rc;
}
