/* ckpt_open.c - opening any checkpoint (a DCP directory, a safetensors file, a Hugging Face directory) and the
 * public readers of one tensor box or one byte item. */
#include "load/ckpt_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/advanced.h"
#include "core/commit.h"
#include "base/crc32c.h"
#include "format/key_path.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "format/meta_wire.h"
#include "format/torch_item.h"
#include "format/zip.h"
#include "io/storage.h"

static int open_path(const char *path, sck_ckpt **out);

int sck_ckpt_open(const char *dir, sck_ckpt **out) {
    if (!dir || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_open: NULL argument");
    *out = NULL;
    /* A crash inside a save's two-rename fallback leaves the checkpoint beside dir (src/core/commit.h). */
    char *path;
    int rc = commit_resolve(dir, &path);
    if (rc) return rc;
    rc = open_path(path, out);
    free(path);
    return rc;
}

static int open_path(const char *path, sck_ckpt **out) {
    struct stat sb;
    if (io_stat(path, &sb) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open checkpoint", path);
    char mp[4096];
    if (S_ISDIR(sb.st_mode)) {
        snprintf(mp, sizeof mp, "%s/.metadata", path);
        if (access(mp, F_OK) != 0) {
            snprintf(mp, sizeof mp, "%s/model.safetensors.index.json", path);
            if (access(mp, F_OK) == 0) return ckpt_open_safetensors(path, out);
            return sck_err(SCK_ERR_FORMAT, "%s: no .metadata: not a DCP checkpoint, or an incomplete one", path);
        }
        return ckpt_open_dcp(path, out, NULL, NULL);
    }
    return ckpt_open_safetensors(path, out);
}

int ckpt_read_box(sck_ckpt *ck, size_t ei, const sck_box *want, void *dst) {
    ck_want w = {ei, want, dst};
    return ckpt_read_boxes(ck, &w, 1);
}

int sck_ckpt_read_box(sck_ckpt *ck, size_t i, const int64_t *offsets, const int64_t *sizes, void *dst) {
    if (ck && i >= ck->m.n && i < ckpt_count(ck))
        return sck_err(SCK_ERR_MISMATCH, "'%s': is a value in %s, not a tensor", ckpt_key(ck, i), META_PT_NAME);
    if (!ck || i >= ck->m.n) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_box: index %zu out of range", i);
    const ck_entry *e = &ck->m.e[i];
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = e->ndim;
    for (int d = 0; d < e->ndim; d++) {
        b.off[d] = offsets ? offsets[d] : 0;
        b.size[d] = sizes ? sizes[d] : e->shape[d];
    }
    if (!dst && box_numel(&b) > 0) return sck_err(SCK_ERR_INVALID_ARG, "'%s': NULL destination", e->key);
    return ckpt_read_box(ck, i, &b, dst);
}

int sck_ckpt_read_flat(sck_ckpt *ck, size_t i, uint64_t begin, uint64_t count, void *dst) {
    if (ck && i >= ck->m.n && i < ckpt_count(ck))
        return sck_err(SCK_ERR_MISMATCH, "'%s': is a value in %s, not a tensor", ckpt_key(ck, i), META_PT_NAME);
    if (!ck || i >= ck->m.n) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_flat: index %zu out of range", i);
    const ck_entry *e = &ck->m.e[i];
    if (e->is_bytes) return sck_err(SCK_ERR_INVALID_ARG, "'%s': is a bytes entry, not a tensor", e->key);
    sck_box boxes[2 * SCK_MAX_DIMS];
    int nb = begin > INT64_MAX || count > INT64_MAX ? -1 : box_from_flat(e->ndim, e->shape, (int64_t)begin, (int64_t)count, boxes);
    if (nb < 0)
        return sck_err(SCK_ERR_INVALID_ARG, "'%s': elements [%llu, +%llu) are outside the tensor", e->key,
                       (unsigned long long)begin, (unsigned long long)count);
    if (!dst && nb > 0) return sck_err(SCK_ERR_INVALID_ARG, "'%s': NULL destination", e->key);
    uint8_t *p = dst;
    for (int k = 0; k < nb; k++) {
        int rc = ckpt_read_box(ck, i, &boxes[k], p);
        if (rc) return rc;
        p += box_numel(&boxes[k]) * sck_dtype_size((sck_dtype)e->dtype);
    }
    return SCK_OK;
}

int ckpt_read_item(sck_ckpt *ck, size_t ei, uint8_t **data, size_t *n) {
    ck_entry *e = &ck->m.e[ei];
    *data = NULL;
    *n = 0;
    if (!e->is_bytes || e->nchunks != 1) return sck_err(SCK_ERR_MISMATCH, "'%s': is a tensor, not a bytes entry", e->key);
    ck_chunk *c = &e->chunks[0];
    char what[4600];
    ck_item_what(ck, e, c, what, sizeof what);
    if (c->transformed) return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms, not supported", what);
    int fd;
    uint64_t fsize;
    int rc = ck_get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = ck_check_window(ck, e, c, fsize))) return rc;
    if (c->length > SIZE_MAX - 1) return sck_err(SCK_ERR_NOMEM, "%s: too large", what);
    uint8_t *p = malloc(c->length ? c->length : 1);
    if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for %llu bytes", what, (unsigned long long)c->length);
    if ((rc = sck_pread_full(fd, p, c->length, c->offset, what)) ||
        (ck->verify && c->has_crc && (rc = ckpt_check_item(ck, ei, 0, p, c->offset, c->length)))) {
        free(p);
        return rc;
    }
    *data = p;
    *n = c->length;
    return SCK_OK;
}

/* Every record of byte item i's archive, read into memory at `raw` (zip directory d, offsets from
 * the item's start), against its zip CRC-32: the item has no CRC-32C. */
static int check_records(const sck_ckpt *ck, size_t i, const uint8_t *raw, const zip_dir *d) {
    uint64_t base = ck->m.e[i].chunks[0].offset;
    for (size_t k = 0; k < d->n; k++) {
        const zip_rec *z = &d->rec[k];
        if (sck_crc32(0, raw + z->data_off, (size_t)z->size) != z->crc)
            return ckpt_zip_mismatch(ck, i, 0, z->name, base + z->data_off, z->size, z->crc);
    }
    return SCK_OK;
}

int sck_ckpt_read_bytes(sck_ckpt *ck, size_t i, void **data, size_t *n, sck_value **value) {
    if (!ck || i >= ckpt_count(ck) || !data || !n || !value)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_bytes: bad argument");
    *data = NULL;
    *n = 0;
    *value = NULL;
    if (i >= ck->m.n) { /* decoded with meta.pt when the checkpoint was opened */
        *value = sck_value_clone(ckpt_meta_value(ck, i));
        return *value ? SCK_OK : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", ckpt_key(ck, i));
    }
    uint8_t *raw;
    size_t len;
    int rc = ckpt_read_item(ck, i, &raw, &len);
    if (rc) return rc;
    /* A torch.save archive (zip magic) holding data.pkl is decoded; anything else is raw bytes, which
     * only a CRC-32C can vouch for: torch writes every byte item with torch.save. */
    int archive = len >= 4 && !memcmp(raw, "PK\x03\x04", 4);
    if (!archive && !ck->m.e[i].chunks[0].has_crc) {
        free(raw);
        return ckpt_unvouched_bytes(ck, i);
    }
    if (archive) {
        zip_mem zm = {raw, len};
        zip_dir zd;
        char what[4600];
        ck_item_what(ck, &ck->m.e[i], &ck->m.e[i].chunks[0], what, sizeof what);
        rc = zip_read_dir(zip_pread_mem, &zm, 0, len, what, &zd);
        if (rc == SCK_OK) {
            const zip_rec *pk = zip_find(&zd, "data.pkl");
            if (ck->verify && !ck->m.e[i].chunks[0].has_crc) rc = check_records(ck, i, raw, &zd); /* torch-written */
            if (!rc && !pk) rc = sck_err(SCK_ERR_FORMAT, "%s: archive has no data.pkl", what);
            else if (!rc) rc = ti_decode_value_pkl(raw + pk->data_off, pk->size, what, value);
            zip_dir_free(&zd);
        }
        if (rc != SCK_ERR_UNSUPPORTED) {
            free(raw);
            return rc;
        }
        sck_err_clear();   /* a value with storages of its own: the archive as it is */
    }
    *data = raw;
    *n = len;
    return SCK_OK;
}
