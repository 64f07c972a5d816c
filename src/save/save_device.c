/* save_device.c - a save's device pieces: payloads copied device -> host into the writer's staging
 * buffers block by block and written from there, the zip header's CRC-32 rewritten once known, and an
 * async save's snapshot copied from the device. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "io/fileio.h"
#include "format/zip.h"
#include "save/save_job.h"

/* The message of a failed device op, prefixed with what was being copied. */
static int dev_error(int rc, const char *what, const char *key, uint64_t off, uint64_t n) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sck_last_error());
    if (rc >= 0 || rc < SCK_ERR_BUSY) rc = SCK_ERR_IO; /* an op that returned no status of ours */
    return sck_err(rc, "'%s': device %s of %llu bytes at byte offset %llu failed: %s", key, what, (unsigned long long)n,
                   (unsigned long long)off, *msg ? msg : "(no message)");
}

int save_dev_payload(const save_job *j, wstream *w, const char *path, const char *key, const uint8_t *dev, uint64_t n,
                     uint32_t *crc, uint32_t *crc_c) {
    const sck_device_ops *ops = j->dev_ops;
    uint32_t z = 0, c = 0;
    (void)path;
    if (!ops) return sck_err(SCK_ERR_INVALID_ARG, "'%s': a device piece in a state without device operations", key);
    /* Each block fills what is left of the current staging buffer: while it is copied, the writer
     * writes the buffer before; a full buffer goes to the writer on commit. */
    for (uint64_t at = 0; at < n;) {
        uint8_t *p;
        uint64_t k;
        int rc = ws_reserve(w, n - at, &p, &k);
        if (rc) return rc;
        sck_err_clear();
        rc = ops->copy_to_host(j->dev_ctx, p, dev + at, (size_t)k);
        if (!rc && ops->wait) rc = ops->wait(j->dev_ctx);
        if (rc) return dev_error(rc, "copy to host", key, at, k);
        z = sck_crc32(z, p, (size_t)k);
        c = sck_crc32c(c, p, (size_t)k);
        if ((rc = ws_commit(w, k))) return rc;
        at += k;
    }
    *crc = z;
    *crc_c = c;
    return SCK_OK;
}

int save_add_patch(save_job *j, uint64_t off, const uint8_t *p, size_t n) {
    if (n > sizeof j->patches->b) return sck_err(SCK_ERR_INVALID_ARG, "internal: a %zu-byte header patch", n);
    if (j->npatches == j->patch_cap) {
        size_t cap = j->patch_cap ? 2 * j->patch_cap : 16;
        save_patch *q = realloc(j->patches, cap * sizeof *q);
        if (!q) return sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", j->rank);
        j->patches = q;
        j->patch_cap = cap;
    }
    save_patch *q = &j->patches[j->npatches++];
    q->off = off;
    q->n = (uint32_t)n;
    memcpy(q->b, p, n);
    return SCK_OK;
}

/* Buffered writes of a few bytes each, after the stream (O_DIRECT or not) has closed the file: the
 * page cache merges them with what is on disk, and the fsync writes them out. */
int save_apply_patches(save_job *j, const char *path) {
    if (!j->npatches) return SCK_OK;
    int fd = io_open(path, O_WRONLY | O_CLOEXEC, 0);
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open to write device payloads' CRCs", path);
    int rc = SCK_OK;
    for (size_t i = 0; i < j->npatches && !rc; i++) rc = io_pwrite_full(fd, j->patches[i].b, j->patches[i].n, j->patches[i].off, path);
    if (!rc && j->do_fsync && io_fsync(fd, path) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", path);
    if (io_close(fd, path) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", path);
    j->npatches = 0;
    return rc;
}

int save_dev_snapshot(const sck_state *st, const save_keep *keep) {
    const sck_device_ops *ops = st->dev_ops;
    if (!keep->dev_nops) return SCK_OK;
    if (!ops) return sck_err(SCK_ERR_INVALID_ARG, "device pieces in a state without device operations");
    /* All issued, then one wait: asynchronous ops overlap the copies of every piece. */
    for (size_t i = 0; i < keep->dev_nops; i++) {
        const copy_op *o = &keep->dev_ops[i];
        sck_err_clear();
        int rc = ops->copy_to_host(st->dev_ctx, o->dst, o->src, o->n);
        if (rc) {
            if (ops->wait) ops->wait(st->dev_ctx); /* nothing may land in the snapshot later */
            return dev_error(rc, "copy to host (async snapshot)", keep->dev_keys[i], 0, o->n);
        }
    }
    sck_err_clear();
    int rc = ops->wait ? ops->wait(st->dev_ctx) : SCK_OK;
    return rc ? dev_error(rc, "copy to host (async snapshot, waiting for its copies)", keep->dev_keys[keep->dev_nops - 1], 0, keep->dev_ops[keep->dev_nops - 1].n) : SCK_OK;
}
