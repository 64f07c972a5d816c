/* fileio.c - buffered sequential writes and atomic small-file commits. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STAGE_BYTES (4u << 20)   /* small pieces are batched up to this size */
#define DIRECT_BYTES (256u << 10) /* pieces this large skip the staging copy */

int fw_open(fwriter *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (!(w->path = sck_strdup(path))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
    int rc = sck_pwrite_full(w->fd, w->stage.data, w->stage.len, w->stage_off, w->path);
    w->stage_off += w->stage.len;
    w->stage.len = 0;
    return rc;
}

int fw_write(fwriter *w, const void *p, uint64_t n) {
    if (n == 0) return SCK_OK;
    if (n >= DIRECT_BYTES) {
        int rc = fw_flush(w);
        if (rc) return rc;
        rc = sck_pwrite_full(w->fd, p, n, w->pos, w->path);
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
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    sck_buf_free(&w->stage);
    free(w->path);
    w->path = NULL;
}

int fw_close(fwriter *w, int do_fsync) {
    int rc = fw_flush(w);
    if (!rc && do_fsync && fsync(w->fd) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", w->path);
    if (close(w->fd) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", w->path);
    w->fd = -1;
    fw_abort(w);
    return rc;
}

int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open directory", dir);
    int rc = SCK_OK;
    if (fsync(fd) != 0 && errno != EINVAL) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync of directory failed", dir);
    close(fd);
    return rc;
}

int ensure_dir(const char *dir) {
    if (mkdir(dir, 0755) == 0) return SCK_OK;
    int e = errno;
    struct stat sb;
    if (e == EEXIST && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return SCK_OK;
    if (e == EEXIST) return sck_err(SCK_ERR_IO, "%s: exists and is not a directory", dir);
    return sck_err_errno(SCK_ERR_IO, e, "%s: cannot create directory", dir);
}

int write_file_atomic(const char *dir, const char *name, const void *data, size_t n, int do_fsync) {
    char tmp[4096], dst[4096];
    int k1 = snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
    int k2 = snprintf(dst, sizeof dst, "%s/%s", dir, name);
    if (k1 < 0 || k2 < 0 || (size_t)k1 >= sizeof tmp || (size_t)k2 >= sizeof dst)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    fwriter w;
    int rc = fw_open(&w, tmp);
    if (rc) return rc;
    rc = sck_pwrite_full(w.fd, data, n, 0, tmp);
    if (rc) {
        fw_abort(&w);
        unlink(tmp);
        return rc;
    }
    if ((rc = fw_close(&w, do_fsync))) {
        unlink(tmp);
        return rc;
    }
    if (rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        return sck_err_errno(SCK_ERR_IO, e, "%s: cannot rename to %s", tmp, dst);
    }
    return do_fsync ? fsync_dir(dir) : SCK_OK;
}
