/* st_writer.c - the advanced tier's streaming safetensors / Hugging Face writer (sck_st_writer): st_out's
 * layout and commit behind an opaque handle that takes tensor bytes block by block. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/advanced.h"
#include "format/st_meta.h"
#include "format/st_out.h"
#include "io/storage.h"

struct sck_st_writer {
    st_layout L;
    int *fds;          /* per file: open for writing, or -1 (opened on its first write) */
    int do_fsync;
    int committed;     /* after sck_st_writer_commit, successful or not: nothing is left to abort */
};

static int lay_out(sck_st_writer *w, const char *path, const sck_st_tensor *t, size_t n, const sck_value *values,
                   const sck_full_opts *o) {
    st_tensor *st = calloc(n ? n : 1, sizeof *st);
    sck_value *md = NULL;
    if (!st) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    int rc = SCK_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        if (!t[i].name || t[i].ndim < 0 || t[i].ndim > SCK_MAX_DIMS || (unsigned)t[i].dtype >= SCK_DTYPE_COUNT)
            rc = sck_err(SCK_ERR_INVALID_ARG, "%s: tensor %zu has no name, a bad ndim or a bad dtype", path, i);
        st[i].name = (char *)t[i].name; /* st_layout_build copies it */
        st[i].dtype = t[i].dtype;
        st[i].ndim = t[i].ndim;
        memcpy(st[i].shape, t[i].shape, sizeof st[i].shape);
    }
    /* Non-tensor entries travel in __metadata__: strings as they are, other values as JSON text. */
    if (!rc) rc = st_meta_from_values(values, &md);
    if (!rc) rc = st_layout_build(st, n, md, o->format == SCK_FULL_HF_SHARDED, o->max_shard_bytes, path, &w->L);
    sck_value_free(md);
    free(st);
    return rc;
}

int sck_st_writer_open(const char *path, const sck_st_tensor *t, size_t n, const sck_value *values,
                       const sck_full_opts *opts, sck_st_writer **out) {
    if (out) *out = NULL;
    if (!path || !*path || !out || (n && !t)) return sck_err(SCK_ERR_INVALID_ARG, "sck_st_writer_open: NULL or empty argument");
    sck_full_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.format != SCK_FULL_SAFETENSORS && o.format != SCK_FULL_HF_SHARDED)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_st_writer_open: unknown format %d", (int)o.format);
    if (o.flags & ~SCK_SAVE_NO_FSYNC) return sck_err(SCK_ERR_INVALID_ARG, "sck_st_writer_open: unknown flags 0x%x", o.flags);
    int rc = sck_check_reserved("sck_st_writer_open: sck_full_opts", o.reserved, sizeof o.reserved / sizeof o.reserved[0]);
    if (rc) return rc;
    sck_st_writer *w = calloc(1, sizeof *w);
    if (!w) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    w->do_fsync = !(o.flags & SCK_SAVE_NO_FSYNC);
    w->committed = 1; /* nothing to abort until st_out_begin succeeds */
    rc = lay_out(w, path, t, n, values, &o);
    if (!rc && !(w->fds = malloc((w->L.nfiles ? w->L.nfiles : 1) * sizeof *w->fds))) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    for (size_t f = 0; !rc && f < w->L.nfiles; f++) w->fds[f] = -1;
    if (!rc && !(rc = st_out_begin(&w->L))) w->committed = 0;
    if (rc) {
        sck_st_writer_free(w);
        return rc;
    }
    *out = w;
    return SCK_OK;
}

int sck_st_writer_write(sck_st_writer *w, size_t i, uint64_t offset, const void *data, size_t len) {
    if (!w || w->committed) return sck_err(SCK_ERR_INVALID_ARG, "sck_st_writer_write: no writer, or it is committed");
    if (i >= w->L.n) return sck_err(SCK_ERR_INVALID_ARG, "%s: tensor %zu out of range (%zu tensors)", w->L.path, i, w->L.n);
    if (offset > w->L.nbytes[i] || len > w->L.nbytes[i] - offset)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: '%s': bytes [%llu, +%zu) are past its %llu bytes", w->L.path, w->L.names[i],
                       (unsigned long long)offset, len, (unsigned long long)w->L.nbytes[i]);
    if (len && !data) return sck_err(SCK_ERR_INVALID_ARG, "%s: '%s': NULL data", w->L.path, w->L.names[i]);
    uint32_t fi = w->L.file_of[i];
    char path[4096];
    int rc = st_out_path(&w->L, fi, 1, path, sizeof path);
    if (!rc && w->fds[fi] < 0) rc = st_out_open(&w->L, fi, &w->fds[fi]);
    if (!rc && len) rc = sck_pwrite_full(w->fds[fi], data, len, w->L.data_off[i] + offset, path);
    return rc;
}

/* Closes every open file, fsyncing it first when `sync`; returns the first error when `report`. */
static int close_files(sck_st_writer *w, int sync, int report) {
    char path[4096];
    int rc = SCK_OK;
    for (size_t f = 0; w->fds && f < w->L.nfiles; f++) {
        if (w->fds[f] < 0) continue;
        st_out_path(&w->L, f, 1, path, sizeof path);
        if (!rc && sync && fsync(w->fds[f]) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", path);
        if (close(w->fds[f]) != 0 && !rc && report) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", path);
        w->fds[f] = -1;
    }
    return rc;
}

int sck_st_writer_commit(sck_st_writer *w) {
    if (!w || w->committed) return sck_err(SCK_ERR_INVALID_ARG, "sck_st_writer_commit: no writer, or it is committed");
    w->committed = 1;
    int rc = close_files(w, w->do_fsync, 1);
    if (!rc) rc = st_out_commit(&w->L, w->do_fsync); /* removes the temporary files itself on error */
    else st_out_abort(&w->L);
    return rc;
}

void sck_st_writer_free(sck_st_writer *w) {
    if (!w) return;
    close_files(w, 0, 0);
    if (!w->committed) st_out_abort(&w->L);
    free(w->fds);
    st_layout_free(&w->L);
    free(w);
}
