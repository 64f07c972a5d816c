/* fileio.c - the file-system calls of a save (each passes the test hook first), buffered sequential
 * writes, and whole-file and whole-directory helpers. */
#include "io/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_hook.h"
#include "io/storage.h"

#define STAGE_BYTES (4u << 20)   /* small pieces are batched up to this size */
#define DIRECT_BYTES (256u << 10) /* pieces this large skip the staging copy */

/* ------------------------------------------------------------------ the hooked calls */

static io_hook_fn hook_fn;
static void *hook_ctx;

void io_hook_set(io_hook_fn fn, void *ctx) {
    hook_ctx = ctx;
    hook_fn = fn;
}

const char *io_kind_name(io_kind kind) {
    static const char *const names[IO_NKINDS] = {"open", "pwrite", "fsync", "close", "rename", "exchange", "mkdir", "unlink", "rmdir",
                                                 "truncate", "setfl"};
    return kind < IO_NKINDS ? names[kind] : "?";
}

/* 0 to go on; otherwise errno is set to the injected error and -1 returned. */
static int hooked(io_kind kind, const char *path) {
    if (!hook_fn) return 0;
    int e = hook_fn(hook_ctx, kind, path);
    if (!e) return 0;
    errno = e;
    return -1;
}

int io_open(const char *path, int flags, mode_t mode) {
    const io_storage *s = io_storage_current();
    return hooked(IO_OPEN, path) ? -1 : s->open(s->ctx, path, flags, mode);
}

int io_fsync(int fd, const char *path) {
    const io_storage *s = io_storage_current();
    return hooked(IO_FSYNC, path) ? -1 : s->fsync(s->ctx, fd, path);
}

int io_close(int fd, const char *path) {
    if (hooked(IO_CLOSE, path)) {
        int e = errno;
        io_close_quiet(fd, path); /* Linux releases the descriptor even when close reports an error */
        errno = e;
        return -1;
    }
    return io_close_quiet(fd, path);
}

int io_rename(const char *from, const char *to) {
    const io_storage *s = io_storage_current();
    return hooked(IO_RENAME, from) ? -1 : s->rename(s->ctx, from, to);
}

int io_exchange(const char *a, const char *b) {
    const io_storage *s = io_storage_current();
    return hooked(IO_EXCHANGE, a) ? -1 : s->exchange(s->ctx, a, b);
}

int io_mkdir(const char *path, mode_t mode) {
    const io_storage *s = io_storage_current();
    return hooked(IO_MKDIR, path) ? -1 : s->mkdir(s->ctx, path, mode);
}

int io_unlink(const char *path) {
    const io_storage *s = io_storage_current();
    return hooked(IO_UNLINK, path) ? -1 : s->unlink(s->ctx, path);
}

int io_setfl(int fd, int flags, const char *path) {
    const io_storage *s = io_storage_current();
    return hooked(IO_SETFL, path) ? -1 : s->setfl(s->ctx, fd, flags, path);
}

int io_rmdir(const char *path) {
    const io_storage *s = io_storage_current();
    return hooked(IO_RMDIR, path) ? -1 : s->rmdir(s->ctx, path);
}

int io_ftruncate(int fd, uint64_t size, const char *path) {
    const io_storage *s = io_storage_current();
    return hooked(IO_TRUNCATE, path) ? -1 : s->ftruncate(s->ctx, fd, size, path);
}

/* pwrite looping over short writes (the kernel moves at most about 2 GiB a call); one hook call per
 * request. */
int io_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    struct iovec v = {(void *)(uintptr_t)buf, n};
    return io_pwritev_full(fd, &v, 1, off, path);
}

int io_pwritev_full(int fd, struct iovec *iov, int niov, uint64_t off, const char *path) {
    const io_storage *s = io_storage_current();
    uint64_t n = 0;
    for (int i = 0; i < niov; i++) n += iov[i].iov_len;
    if (hooked(IO_PWRITE, path)) return sck_err_errno(SCK_ERR_IO, errno, "%s: write of %llu bytes at offset %llu failed", path, (unsigned long long)n, (unsigned long long)off);
    while (niov > 0) {
        ssize_t w = s->pwritev(s->ctx, fd, iov, niov, off, path);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            return sck_err_errno(SCK_ERR_IO, e, "%s: write of %llu bytes at offset %llu failed", path, (unsigned long long)n, (unsigned long long)off);
        }
        off += (uint64_t)w;
        n -= (uint64_t)w;
        while (niov > 0 && (size_t)w >= iov->iov_len) w -= (ssize_t)iov->iov_len, iov++, niov--;
        if (niov > 0) iov->iov_base = (uint8_t *)iov->iov_base + w, iov->iov_len -= (size_t)w;
    }
    return SCK_OK;
}

/* ------------------------------------------------------------------ sequential writer */

int fw_open(fwriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (!(w->path = sck_strdup(path))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    w->fd = io_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w->path);
        w->path = NULL;
        return sck_err_errno(SCK_ERR_IO, e, "%s: cannot create", path);
    }
    return SCK_OK;
}

static int fw_flush(fwriter *w) {
    if (!w->stage.len) return SCK_OK;
    int rc = io_pwrite_full(w->fd, w->stage.data, w->stage.len, w->stage_off, w->path);
    w->stage_off += w->stage.len;
    w->stage.len = 0;
    return rc;
}

int fw_write(fwriter *w, const void *p, uint64_t n) {
    if (n == 0) return SCK_OK;
    if (n >= DIRECT_BYTES) {
        int rc = fw_flush(w);
        if (rc) return rc;
        rc = io_pwrite_full(w->fd, p, n, w->pos, w->path);
        if (rc) return rc;
        w->pos += n;
        w->stage_off = w->pos;
        return SCK_OK;
    }
    if (w->stage.len + n > STAGE_BYTES) {
        int rc = fw_flush(w);
        if (rc) return rc;
    }
    if (sck_buf_append(&w->stage, p, n)) return sck_err(SCK_ERR_NOMEM, "%s: out of memory staging a write", w->path);
    w->pos += n;
    return SCK_OK;
}

void fw_abort(fwriter *w) {
    if (w->fd >= 0) io_close_quiet(w->fd, w->path); /* not hooked: an error path must never fail or leak */
    w->fd = -1;
    sck_buf_free(&w->stage);
    free(w->path);
    w->path = NULL;
}

int fw_close(fwriter *w, int do_fsync) {
    int rc = fw_flush(w);
    if (!rc && do_fsync && io_fsync(w->fd, w->path) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", w->path);
    if (io_close(w->fd, w->path) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", w->path);
    w->fd = -1;
    fw_abort(w);
    return rc;
}

/* ------------------------------------------------------------------ whole files and directories */

int write_file_begin(const char *dir, const char *name, const void *data, size_t n, int writeback, fwriter *w) {
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= sizeof path) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    int rc = fw_open(w, path);
    if (rc) return rc;
    if ((rc = io_pwrite_full(w->fd, data, n, 0, path))) {
        fw_abort(w);
        return rc;
    }
    w->pos = w->stage_off = n;
    if (writeback) sync_file_range(w->fd, 0, 0, SYNC_FILE_RANGE_WRITE); /* advice only: fsync finds it done */
    return SCK_OK;
}

int write_file(const char *dir, const char *name, const void *data, size_t n, int do_fsync) {
    fwriter w;
    int rc = write_file_begin(dir, name, data, n, 0, &w);
    return rc ? rc : fw_close(&w, do_fsync);
}

int fsync_dir(const char *dir) {
    int fd = io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open directory", dir);
    int rc = SCK_OK;
    /* EINVAL: the file system cannot sync directories (nothing to do) */
    if (io_fsync(fd, dir) != 0 && errno != EINVAL) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync of directory failed", dir);
    if (io_close(fd, dir) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close of directory failed", dir);
    return rc;
}

int ensure_dir(const char *dir) {
    if (io_mkdir(dir, 0755) == 0) return SCK_OK;
    int e = errno;
    struct stat sb;
    if (e == EEXIST && io_stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return SCK_OK;
    if (e == EEXIST) return sck_err(SCK_ERR_IO, "%s: exists and is not a directory", dir);
    return sck_err_errno(SCK_ERR_IO, e, "%s: cannot create directory", dir);
}

int remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return SCK_OK;
        return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open directory to remove it", dir);
    }
    int rc = SCK_OK;
    struct dirent *de;
    char p[4096];
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        int k = snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (k < 0 || (size_t)k >= sizeof p) rc = sck_err(SCK_ERR_IO, "%s: path too long", dir);
        else if (io_unlink(p) != 0 && errno != ENOENT) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot remove", p);
    }
    closedir(d);
    if (!rc && io_rmdir(dir) != 0 && errno != ENOENT) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot remove directory", dir);
    return rc;
}
