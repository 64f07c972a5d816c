/* storage.c - the POSIX table of file operations, the one in use, and the read/write helpers over it. */
#include "io/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/util.h"

static int px_open(void *ctx, const char *path, int flags, mode_t mode) { (void)ctx; return open(path, flags, mode); }
static int px_close(void *ctx, int fd, const char *path) { (void)ctx, (void)path; return close(fd); }
static int px_fstat(void *ctx, int fd, struct stat *sb, const char *path) { (void)ctx, (void)path; return fstat(fd, sb); }
static int px_stat(void *ctx, const char *path, struct stat *sb) { (void)ctx; return stat(path, sb); }
static int px_lstat(void *ctx, const char *path, struct stat *sb) { (void)ctx; return lstat(path, sb); }
static ssize_t px_preadv(void *ctx, int fd, const struct iovec *iov, int n, uint64_t off, const char *path) {
    (void)ctx, (void)path;
    return preadv(fd, iov, n, (off_t)off);
}
static ssize_t px_pwritev(void *ctx, int fd, const struct iovec *iov, int n, uint64_t off, const char *path) {
    (void)ctx, (void)path;
    return pwritev(fd, iov, n, (off_t)off);
}
static int px_fsync(void *ctx, int fd, const char *path) { (void)ctx, (void)path; return fsync(fd); }
static int px_ftruncate(void *ctx, int fd, uint64_t size, const char *path) { (void)ctx, (void)path; return ftruncate(fd, (off_t)size); }
static int px_setfl(void *ctx, int fd, int flags, const char *path) { (void)ctx, (void)path; return fcntl(fd, F_SETFL, flags); }
static int px_rename(void *ctx, const char *from, const char *to) { (void)ctx; return rename(from, to); }
static int px_exchange(void *ctx, const char *a, const char *b) {
    (void)ctx;
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}
static int px_mkdir(void *ctx, const char *path, mode_t mode) { (void)ctx; return mkdir(path, mode); }
static int px_unlink(void *ctx, const char *path) { (void)ctx; return unlink(path); }
static int px_rmdir(void *ctx, const char *path) { (void)ctx; return rmdir(path); }
static int px_flock(void *ctx, int fd, int op, const char *path) { (void)ctx, (void)path; return flock(fd, op); }

static const io_storage posix_storage = {NULL, px_open, px_close, px_fstat, px_stat, px_lstat, px_preadv, px_pwritev, px_fsync,
                                         px_ftruncate, px_setfl, px_rename, px_exchange, px_mkdir, px_unlink, px_rmdir, px_flock};

/* atomic: helper threads (read-ahead pipes, write streams) read it while a test may have set it */
static _Atomic(const io_storage *) current = &posix_storage;

const io_storage *io_storage_posix(void) { return &posix_storage; }
void io_storage_set(const io_storage *s) { atomic_store(&current, s ? s : &posix_storage); }
const io_storage *io_storage_current(void) { return atomic_load_explicit(&current, memory_order_relaxed); }

int io_open_read(const char *path, int flags) {
    const io_storage *s = io_storage_current();
    return s->open(s->ctx, path, flags, 0);
}

int io_close_quiet(int fd, const char *path) {
    const io_storage *s = io_storage_current();
    return s->close(s->ctx, fd, path);
}

int io_fstat(int fd, struct stat *sb, const char *path) {
    const io_storage *s = io_storage_current();
    return s->fstat(s->ctx, fd, sb, path);
}

int io_stat(const char *path, struct stat *sb) {
    const io_storage *s = io_storage_current();
    return s->stat(s->ctx, path, sb);
}

static int read_file(const char *path, uint8_t **data, size_t *len, int big, int nofollow) {
    *data = NULL;
    *len = 0;
    /* O_NONBLOCK: a FIFO in a file's place must not hang the open (it is refused below) */
    int fd = io_open_read(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0 && nofollow && errno == ELOOP)
        return sck_err(SCK_ERR_FORMAT, "%s: a symbolic link; checkpoint files must be regular files in the directory", path);
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open", path);
    struct stat sb;
    if (io_fstat(fd, &sb, path) != 0) {
        int e = errno;
        io_close_quiet(fd, path);
        return sck_err_errno(SCK_ERR_IO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(sb.st_mode)) {
        io_close_quiet(fd, path);
        return sck_err(SCK_ERR_IO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *p = big ? sck_big_alloc(n) : malloc(n ? n : 1);
    if (!p) {
        io_close_quiet(fd, path);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    int rc = sck_pread_full(fd, p, n, 0, path);
    io_close_quiet(fd, path);
    if (rc) {
        if (big) sck_big_free(p);
        else free(p);
        return rc;
    }
    *data = p;
    *len = n;
    return SCK_OK;
}

int sck_read_file(const char *path, uint8_t **data, size_t *len) { return read_file(path, data, len, 0, 0); }

int sck_read_file_big(const char *path, uint8_t **data, size_t *len) { return read_file(path, data, len, 1, 0); }

int sck_read_file_own(const char *path, uint8_t **data, size_t *len) { return read_file(path, data, len, 1, 1); }

int sck_pread_full(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    const io_storage *S = io_storage_current();
    uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done;
        if (want > (1u << 30)) want = 1u << 30;
        struct iovec v = {p + done, want};
        ssize_t r = S->preadv(S->ctx, fd, &v, 1, off + done, path);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sck_err_errno(SCK_ERR_IO, errno, "%s: read of %zu bytes at offset %llu failed", path, n,
                                 (unsigned long long)off);
        }
        if (r == 0)
            return sck_err(SCK_ERR_FORMAT, "%s: truncated: wanted %zu bytes at offset %llu, file ends at %llu", path,
                           n, (unsigned long long)off, (unsigned long long)(off + done));
        done += (size_t)r;
    }
    return SCK_OK;
}

int sck_preadv_full(int fd, struct iovec *iov, int n, uint64_t off, const char *path) {
    const io_storage *S = io_storage_current();
    while (n > 0) {
        ssize_t got = S->preadv(S->ctx, fd, iov, n, off, path);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: read at offset %llu failed", path, (unsigned long long)off);
        if (got == 0) return sck_err(SCK_ERR_FORMAT, "%s: truncated at offset %llu", path, (unsigned long long)off);
        off += (uint64_t)got;
        while (n > 0 && (size_t)got >= iov->iov_len) got -= (ssize_t)iov->iov_len, iov++, n--;
        if (n > 0) iov->iov_base = (uint8_t *)iov->iov_base + got, iov->iov_len -= (size_t)got;
    }
    return SCK_OK;
}

int sck_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const io_storage *S = io_storage_current();
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < n) {
        size_t want = n - done;
        if (want > (1u << 30)) want = 1u << 30;
        struct iovec v = {(void *)(p + done), want};
        ssize_t r = S->pwritev(S->ctx, fd, &v, 1, off + done, path);
        if (r < 0) {
            if (errno == EINTR) continue;
            return sck_err_errno(SCK_ERR_IO, errno, "%s: write of %zu bytes at offset %llu failed", path, n,
                                 (unsigned long long)(off + done));
        }
        if (r == 0) return sck_err(SCK_ERR_IO, "%s: write returned 0 at offset %llu", path, (unsigned long long)(off + done));
        done += (size_t)r;
    }
    return SCK_OK;
}

int io_lstat(const char *path, struct stat *sb) {
    const io_storage *s = io_storage_current();
    return s->lstat(s->ctx, path, sb);
}
