/* item_file.c - one item's place on disk: data files opened on first use, the windows of file bytes reads are
 * served from, the resolution of a chunk's item (torch.save zip headers, byte order, strides), the
 * descriptors for streaming and O_DIRECT reads, and the messages that name file, key and offset. */
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

#include "core/commit.h"
#include "base/crc32c.h"
#include "format/key_path.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "format/meta_wire.h"
#include "format/torch_item.h"
#include "format/zip.h"
#include "io/storage.h"

/* Opens a data file on first use and checks it is a regular file. */
static int dir_replaced(const sck_ckpt *ck);

int ck_get_file(sck_ckpt *ck, uint32_t fi, int *fd, uint64_t *size) {
    ck_file *f = &ck->files[fi];
    if (f->fd < 0) {
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        if (k < 0 || (size_t)k >= sizeof p) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", ck->m.files[fi]);
        int d = io_open_read(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (ck->files_may_link ? 0 : O_NOFOLLOW));
        if (d < 0) {
            int e = errno;
            if (e == ENOENT && dir_replaced(ck)) return ck_replaced_error(ck, "a data file .metadata names is gone");
            return sck_err_errno(SCK_ERR_IO, e, "%s: cannot open data file", p);
        }
        struct stat sb;
        if (io_fstat(d, &sb, p) != 0 || !S_ISREG(sb.st_mode)) {
            io_close_quiet(d, p);
            return sck_err(SCK_ERR_IO, "%s: not a regular file", p);
        }
        f->fd = d;
        f->size = (uint64_t)sb.st_size;
    }
    *fd = f->fd;
    *size = f->size;
    return SCK_OK;
}

void ck_item_what(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s: '%s' item at offset %llu", ck->dir, ck->m.files[c->file], e->key, (unsigned long long)c->offset);
}

int ck_check_window(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, uint64_t fsize) {
    if (c->offset > fsize || c->length > fsize - c->offset) {
        return sck_err(SCK_ERR_FORMAT, "%s/%s: '%s' item [%llu, +%llu) extends past the end of the file (%llu bytes)", ck->dir,
                       ck->m.files[c->file], e->key, (unsigned long long)c->offset, (unsigned long long)c->length,
                       (unsigned long long)fsize);
    }
    return SCK_OK;
}

static int cmp_span(const void *a, const void *b) {
    const ck_span *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The index of the first span of `file` in sp[0..n) (sorted by cmp_span) that starts at or after
 * `off`; n if there is none. */
size_t ck_span_at_or_after(const ck_span *sp, size_t n, uint32_t file, uint64_t off) {
    size_t lo = 0, hi = n;
    ck_span key = {file, 0, off, 0, 0};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_span(&sp[mid], &key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && sp[lo].file == file ? lo : n;
}

/* Sorted spans of every item (all: ck->spans) or of the large ones only (ck->bigs), made on first use;
 * 0 when out of memory (they only serve hints and bounds). */
int ck_spans_ready(sck_ckpt *ck, int all) {
    ck_span **sp = all ? &ck->spans : &ck->bigs;
    size_t *n = all ? &ck->nspans : &ck->nbigs;
    if (*sp) return 1;
    size_t cap = 0;
    for (size_t i = 0; i < ck->m.n; i++)
        for (size_t k = 0; k < ck->m.e[i].nchunks; k++) cap += all || ck->m.e[i].chunks[k].length > SMALL_ITEM;
    if (!(*sp = malloc((cap ? cap : 1) * sizeof **sp))) return 0;
    for (size_t i = 0; i < ck->m.n; i++)
        for (size_t k = 0; k < ck->m.e[i].nchunks; k++) {
            const ck_chunk *x = &ck->m.e[i].chunks[k];
            if (all || x->length > SMALL_ITEM) (*sp)[(*n)++] = (ck_span){x->file, x->tail, x->offset, x->length, x->payload};
        }
    sck_sort(*sp, *n, sizeof **sp, cmp_span);
    return 1;
}

/* The window to fill when [off, off+n) of chunk c's item is not in memory: a small item whole, with
 * what follows it (the next small items, usually read next) up to RC_CAP, but not past the start of
 * the next large item, which is read its own way (a window reaching into it copied megabytes for
 * nothing: a norm's weight before its layer's matrix); for a large item 64 KiB at its start or end
 * (its headers), else up to RC_CAP from `off` on.  Always inside the file and holding the request. */
void ck_fill_range(sck_ckpt *ck, const ck_chunk *c, uint64_t fsize, uint64_t off, uint64_t n, uint64_t *lo, uint64_t *hi) {
    uint64_t end = c->offset + c->length;
    if (c->length <= SMALL_ITEM) {
        *lo = c->offset;
        *hi = fsize - c->offset > RC_CAP ? c->offset + RC_CAP : fsize;
        size_t k = ck_spans_ready(ck, 0) ? ck_span_at_or_after(ck->bigs, ck->nbigs, c->file, end) : ck->nbigs;
        if (k < ck->nbigs && ck->bigs[k].off < *hi) *hi = ck->bigs[k].off;
    } else if (c->payload && off + n <= c->offset + c->payload) { /* our layout: the headers, exactly */
        *lo = c->offset;
        *hi = c->offset + c->payload;
    } else if (c->tail && off >= end - c->tail) { /* and the zip directory */
        *lo = end - c->tail;
        *hi = end;
    } else if (off + n - c->offset <= HEAD_BYTES) {
        *lo = c->offset;
        *hi = c->offset + HEAD_BYTES;
    } else if (end - off <= HEAD_BYTES) {
        *lo = end - HEAD_BYTES;
        *hi = end;
    } else {
        *lo = off;
        *hi = end - off > RC_CAP ? off + RC_CAP : end;
    }
}

/* Points *p at [off, off+n) of the item (n <= RC_CAP); valid until the next read. */
int ck_item_view(item_rd *r, uint64_t off, uint64_t n, const uint8_t **p) {
    uint64_t lo, hi;
    ck_fill_range(r->ck, r->c, r->fsize, off, n, &lo, &hi);
    return rc_get(&r->ck->rc, r->fd, off, n, lo, hi, r->what, p);
}

int ck_item_pread(void *ctx, void *buf, size_t n, uint64_t off) {
    item_rd *r = ctx;
    if (n > HEAD_BYTES) return sck_pread_full(r->fd, buf, n, off, r->what);
    const uint8_t *p;
    int rc = ck_item_view(r, off, n, &p);
    if (!rc && n) memcpy(buf, p, n);
    return rc;
}

/* The element strides of the stored view of a chunk at cbox (r resolved); buf holds them when they are
 * row-major.  Valid until the next resolve. */
const int64_t *ck_res_strides(const sck_ckpt *ck, const sck_box *cbox, const ck_res *r, int64_t *buf) {
    if (r->strides) return ck->strides[r->strides - 1];
    box_strides(cbox, buf);
    return buf;
}

/* Whether resolving chunk c reads its item's headers (zip directory, data.pkl): not for raw payloads,
 * nor for our own items, whose payload offset the model cache records.  An item without a CRC-32C
 * always: its zip CRC-32s are what a read checks. */
int ck_resolve_reads(const sck_ckpt *ck, const ck_chunk *c) { return !c->raw && !(c->payload && c->has_crc && !ck->full_resolve); }

/* Records where chunk r's storage record lies and its zip CRC-32 (ck->zrecs), replacing what an earlier
 * resolve of the chunk recorded (sck_ckpt_verify resolves again). */
static int set_zrec(sck_ckpt *ck, const ck_res *r, const zip_rec *dr, const char *name, const char *what) {
    size_t k = (size_t)(r - ck->res_pool);
    if (!ck->zrec_of && !(ck->zrec_of = calloc(ck->res_pool_n, sizeof *ck->zrec_of)))
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
    if (!ck->zrec_of[k]) {
        if (ck->nzrecs == ck->capzrecs) {
            size_t cap = ck->capzrecs ? 2 * ck->capzrecs : 16;
            ck_zrec *p = cap < UINT32_MAX ? realloc(ck->zrecs, cap * sizeof *p) : NULL;
            if (!p) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
            ck->zrecs = p;
            ck->capzrecs = cap;
        }
        ck->zrec_of[k] = (uint32_t)++ck->nzrecs;
    }
    ck_zrec *z = &ck->zrecs[ck->zrec_of[k] - 1];
    z->off = dr->data_off;
    z->len = dr->size;
    z->crc = dr->crc;
    size_t n = strnlen(name, sizeof z->name - 1); /* cut: the name only serves messages */
    memcpy(z->name, name, n);
    z->name[n] = 0;
    return SCK_OK;
}

/* Chunk r's storage record (set_zrec), or NULL: an item of ours, or one without storage bytes. */
const ck_zrec *ck_zrec_of(const sck_ckpt *ck, const ck_res *r) {
    uint32_t k = ck->zrec_of ? ck->zrec_of[r - ck->res_pool] : 0;
    return k ? &ck->zrecs[k - 1] : NULL;
}

/* The table of every chunk's resolution, made on first use. */
int ck_res_ready(sck_ckpt *ck, const char *key) {
    if (ck->res_pool) return SCK_OK;
    size_t n = ck_meta_nchunks(&ck->m);
    if (!(ck->res_pool = sck_huge_calloc(n ? n : 1, sizeof *ck->res_pool))) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", key);
    ck->res_pool_n = n ? n : 1;
    n = 0;
    for (size_t i = 0; i < ck->m.n; i++) ck->res[i] = ck->res_pool + n, n += ck->m.e[i].nchunks;
    return SCK_OK;
}

/* Resolves where a chunk's elements are: parses the item's zip and data.pkl (or trusts the raw layout). */
int ckpt_resolve_chunk(sck_ckpt *ck, size_t ei, size_t ci, ck_res **out) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    int rc = ck_res_ready(ck, e->key);
    if (rc) return rc;
    ck_res *r = &ck->res[ei][ci];
    *out = r;
    if (r->done) return SCK_OK;
    /* Named only where a message needs it: formatting the name for each of 80 000 chunks took a
     * twentieth of a load of small tensors. */
    char what[4600];
    if (c->transformed) {
        ck_item_what(ck, e, c, what, sizeof what);
        return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms (e.g. compression), not supported", what);
    }
    int fd;
    uint64_t fsize;
    rc = ck_get_file(ck, c->file, &fd, &fsize);
    if (rc) return rc;
    if ((rc = ck_check_window(ck, e, c, fsize))) return rc;
    size_t elem = sck_dtype_size((sck_dtype)e->dtype);
    uint64_t numel = ck_chunk_numel(e, ci), need;
    int big = sck_mul_overflow_u64(numel, elem, &need);
    if (!big && c->raw && c->length == need) {
        r->data_off = c->offset;
        r->done = 1;
        return SCK_OK;
    }
    if (!big && !c->raw && !ck_resolve_reads(ck, c) && need <= c->length - c->payload) { /* our own item: the model cache says where its payload is */
        r->data_off = c->offset + c->payload;
        r->done = 1;
        return SCK_OK;
    }
    ck_item_what(ck, e, c, what, sizeof what);
    if (big) return sck_err(SCK_ERR_FORMAT, "%s: chunk too large", what);
    if (c->raw)
        return sck_err(SCK_ERR_FORMAT, "%s: holds %llu bytes, expected %llu", what, (unsigned long long)c->length, (unsigned long long)need);
    if (!ck_resolve_reads(ck, c))
        return sck_err(SCK_ERR_FORMAT, "%s: a payload of %llu bytes at %llu does not fit the item", what, (unsigned long long)need,
                       (unsigned long long)c->payload);
    item_rd ird = {ck, fd, c, fsize, what};
    zip_dir zd;
    memset(&zd, 0, sizeof zd);
    rc = zip_read_dir(ck_item_pread, &ird, c->offset, c->length, what, &zd);
    if (rc) return rc;
    const zip_rec *pk = zip_find(&zd, "data.pkl");
    uint8_t *pkl = NULL;
    ti_tensor t;
    if (!pk) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: archive has no data.pkl", what);
        goto out;
    }
    if (pk->size > MAX_PKL) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: data.pkl of %llu bytes is implausibly large", what, (unsigned long long)pk->size);
        goto out;
    }
    pkl = malloc(pk->size ? pk->size : 1);
    if (!pkl) {
        rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    if ((rc = ck_item_pread(&ird, pkl, pk->size, pk->data_off))) goto out;
    /* Without a CRC-32C (torch-written), the zip CRC-32 of each record read is checked: data.pkl here,
     * before decoding it (a flipped bit then reads as a mismatch, not as what it broke). */
    int zcheck = ck->verify && !c->has_crc;
    if (zcheck && sck_crc32(0, pkl, (size_t)pk->size) != pk->crc) {
        rc = ckpt_zip_mismatch(ck, ei, ci, "data.pkl", pk->data_off, pk->size, pk->crc);
        goto out;
    }
    if ((rc = ti_decode_tensor_pkl(pkl, pk->size, what, &t))) goto out;
    if (t.dtype != (sck_dtype)e->dtype) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored dtype %s differs from metadata dtype %s", what, sck_dtype_name(t.dtype),
                     e->dtype_name);
        goto out;
    }
    if (t.ndim != e->ndim || (t.ndim && memcmp(t.size, ck_chunk_size(e, ci), (size_t)t.ndim * sizeof *t.size))) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored tensor shape differs from the chunk's sizes in metadata", what);
        goto out;
    }
    char rec[80];
    snprintf(rec, sizeof rec, "data/%s", t.storage_key);
    const zip_rec *dr = zip_find(&zd, rec);
    if (!dr && need == 0) {
        r->data_off = c->offset;
    } else if (!dr) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: archive lacks storage record %s", what, rec);
        goto out;
    } else {
        if (dr->size < t.storage_bytes) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: storage record %s holds %llu bytes, data.pkl declares %llu", what, rec,
                         (unsigned long long)dr->size, (unsigned long long)t.storage_bytes);
            goto out;
        }
        r->data_off = dr->data_off + (uint64_t)t.storage_offset * elem;
        if (!c->has_crc && (rc = set_zrec(ck, r, dr, rec, what))) goto out;
    }
    int64_t rm[SCK_MAX_DIMS];
    sck_box cbox;
    ck_chunk_box(e, ci, &cbox);
    box_strides(&cbox, rm);
    r->strides = 0;
    if (e->ndim && memcmp(rm, t.stride, (size_t)e->ndim * sizeof *rm)) { /* a view torch saved as it was */
        if (ck->nstrides == ck->capstrides) {
            size_t cap = ck->capstrides ? 2 * ck->capstrides : 16;
            int64_t(*p)[SCK_MAX_DIMS] = cap < UINT32_MAX ? realloc(ck->strides, cap * sizeof *p) : NULL;
            if (!p) {
                rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", what);
                goto out;
            }
            ck->strides = p;
            ck->capstrides = cap;
        }
        memcpy(ck->strides[ck->nstrides++], t.stride, sizeof *ck->strides);
        r->strides = (uint32_t)ck->nstrides;
    }
    const zip_rec *bo = zip_find(&zd, "byteorder");
    if (bo) {
        char b[8] = {0};
        if (bo->size > 6 || (rc = ck_item_pread(&ird, b, bo->size, bo->data_off))) {
            if (!rc) rc = sck_err(SCK_ERR_FORMAT, "%s: bad byteorder record", what);
            goto out;
        }
        if (zcheck && sck_crc32(0, b, (size_t)bo->size) != bo->crc) {
            rc = ckpt_zip_mismatch(ck, ei, ci, "byteorder", bo->data_off, bo->size, bo->crc);
            goto out;
        }
        if (!strcmp(b, "big")) r->swap = (uint8_t)(sck_dtype_swap_unit((sck_dtype)e->dtype) > 1 ? sck_dtype_swap_unit((sck_dtype)e->dtype) : 0);
        else if (strcmp(b, "little")) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: byteorder record '%s' is neither little nor big", what, b);
            goto out;
        }
    }
    if (c->payload) { /* verifying: the archive must agree with the model cache */
        if (r->data_off != c->offset + c->payload || r->swap || (need && r->strides)) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: the archive's payload (at %llu) is not where %s says (at %llu, row-major, little-endian)",
                         what, (unsigned long long)(r->data_off - c->offset), META_SIDE_NAME, (unsigned long long)c->payload);
            goto out;
        }
    }
    r->done = 1;
out:
    free(pkl);
    zip_dir_free(&zd);
    return rc;
}

static void fmt_dims(char *buf, size_t cap, int ndim, const int64_t *off) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)off[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* 1 if ck->dir is no longer the directory this checkpoint was opened from: a save swapped a new
 * checkpoint in (or removed it) while we read. */
static int dir_replaced(const sck_ckpt *ck) {
    struct stat sb;
    if (!ck->dir_known) return 0;
    if (io_stat(ck->dir, &sb) != 0) return errno == ENOENT;
    return (uint64_t)sb.st_dev != ck->dir_dev || (uint64_t)sb.st_ino != ck->dir_ino;
}

int ck_replaced_error(const sck_ckpt *ck, const char *what) {
    return sck_err(SCK_ERR_BUSY, "%s: replaced by another save while this load read it (%s); load it again", ck->dir, what);
}

/* The start of a checksum error for chunk ci of entry ei: `what` names file, key and item offset, `at`
 * the chunk's place in its tensor ("" for byte items).  Where a save replaced the checkpoint meanwhile,
 * that is the error instead: SCK_ERR_BUSY, returned here, and the caller passes it on. */
static int mismatch_where(const sck_ckpt *ck, size_t ei, size_t ci, char *what, size_t wcap, char at[400]) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    at[0] = 0;
    if (dir_replaced(ck)) {
        snprintf(what, wcap, "'%s' in %s no longer matches .metadata", e->key, ck->m.files[c->file]);
        return ck_replaced_error(ck, what);
    }
    ck_item_what(ck, e, c, what, wcap);
    if (!e->is_bytes) {
        char dims[360];
        fmt_dims(dims, sizeof dims, e->ndim, ck_chunk_off(e, ci));
        snprintf(at, 400, " (chunk %zu at %s)", ci, dims);
    }
    return SCK_OK;
}

int ckpt_crc_mismatch(const sck_ckpt *ck, size_t ei, size_t ci, uint32_t crc) {
    const ck_chunk *c = &ck->m.e[ei].chunks[ci];
    char what[4600], at[400];
    int rc = mismatch_where(ck, ei, ci, what, sizeof what, at);
    if (rc) return rc;
    return sck_err(SCK_ERR_CHECKSUM, "%s%s: bytes [%llu, %llu) have CRC-32C 0x%08x, .metadata records 0x%08x", what, at,
                   (unsigned long long)c->offset, (unsigned long long)(c->offset + c->length), crc, c->crc32c);
}

int ckpt_zip_mismatch(const sck_ckpt *ck, size_t ei, size_t ci, const char *rec, uint64_t off, uint64_t len, uint32_t want) {
    char what[4600], at[400];
    int rc = mismatch_where(ck, ei, ci, what, sizeof what, at);
    if (rc) return rc;
    return sck_err(SCK_ERR_CHECKSUM, "%s%s: record %s (at offset %llu, %llu bytes) does not match its zip CRC-32 (0x%08x)", what, at,
                   rec, (unsigned long long)off, (unsigned long long)len, want);
}

int ckpt_unvouched_bytes(const sck_ckpt *ck, size_t ei) {
    char what[4600], at[400];
    int rc = mismatch_where(ck, ei, 0, what, sizeof what, at);
    if (rc) return rc;
    return sck_err(SCK_ERR_CHECKSUM,
                   "%s%s: not a torch.save archive (no zip signature) and no CRC-32C vouches for it as raw "
                   "bytes; torch's loader torch.load()s every byte item, so it is damaged",
                   what, at);
}

/* The O_DIRECT descriptor of file fi, or -1 where the file system refuses O_DIRECT (or the path no
 * longer names the file already open: then buffered reads go on from the first descriptor). */
int ck_direct_fd(sck_ckpt *ck, uint32_t fi) {
    ck_file *f = &ck->files[fi];
    if (f->dfd == -1) {
        f->dfd = -2;
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        int d = k > 0 && (size_t)k < sizeof p ? io_open_read(p, O_RDONLY | O_CLOEXEC | O_DIRECT | (ck->files_may_link ? 0 : O_NOFOLLOW)) : -1;
        struct stat a, b;
        if (d >= 0 && io_fstat(d, &a, p) == 0 && io_fstat(f->fd, &b, p) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) f->dfd = d;
        else if (d >= 0) io_close_quiet(d, p);
    }
    return f->dfd >= 0 ? f->dfd : -1;
}

/* The descriptor long runs are read through: a second one on the same file (checked to be the same
 * file), or the first one if that cannot be had. */
int ck_stream_fd(sck_ckpt *ck, uint32_t fi) {
    ck_file *f = &ck->files[fi];
    if (f->sfd == -1) {
        f->sfd = -2;
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        int d = k > 0 && (size_t)k < sizeof p ? io_open_read(p, O_RDONLY | O_CLOEXEC | (ck->files_may_link ? 0 : O_NOFOLLOW)) : -1;
        struct stat a, b;
        if (d >= 0 && io_fstat(d, &a, p) == 0 && io_fstat(f->fd, &b, p) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
            f->sfd = d;
            posix_fadvise(d, 0, 0, POSIX_FADV_SEQUENTIAL); /* advice only: a larger read-ahead window */
        } else if (d >= 0) {
            io_close_quiet(d, p);
        }
    }
    return f->sfd >= 0 ? f->sfd : f->fd;
}

/* Reads a long run into dst: the page-aligned middle with O_DIRECT when asked for and possible (file
 * offset and memory equally misaligned), the ends and everything else buffered. */
int ck_read_long(sck_ckpt *ck, uint32_t fi, uint8_t *d, uint64_t n, uint64_t abs, const char *what) {
    int fd = ck_stream_fd(ck, fi), dfd;
    uint64_t head = (WS_DIO_ALIGN - abs % WS_DIO_ALIGN) % WS_DIO_ALIGN;
    if (!ck->direct || (uintptr_t)d % WS_DIO_ALIGN != abs % WS_DIO_ALIGN || n < head + WS_DIO_ALIGN || (dfd = ck_direct_fd(ck, fi)) < 0)
        return sck_pread_full(fd, d, n, abs, what);
    uint64_t mid = (n - head) / WS_DIO_ALIGN * WS_DIO_ALIGN;
    int rc = head ? sck_pread_full(fd, d, head, abs, what) : SCK_OK;
    if (!rc) rc = sck_pread_full(dfd, d + head, mid, abs + head, what);
    if (!rc && n > head + mid) rc = sck_pread_full(fd, d + head + mid, n - head - mid, abs + head + mid, what);
    return rc;
}

void ck_swap_elems(uint8_t *p, uint64_t nbytes, size_t elem) {
    for (uint64_t i = 0; i + elem <= nbytes; i += elem) {
        for (size_t a = 0, b = elem - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}

/* Asks the kernel for the first `ahead` bytes of the item at [off, +len) of file `file` and for its
 * last `tail` (its zip directory). */
void ck_advise_headers(const sck_ckpt *ck, uint32_t file, uint64_t off, uint64_t len, uint64_t ahead, uint64_t tail) {
    int fd = ck->files[file].fd;
    posix_fadvise(fd, (off_t)off, (off_t)(len < ahead ? len : ahead), POSIX_FADV_WILLNEED); /* advice only */
    if (len <= ahead) return;
    uint64_t from = tail < len - ahead ? off + len - tail : off + ahead; /* not again what the head asked for */
    posix_fadvise(fd, (off_t)from, (off_t)(off + len - from), POSIX_FADV_WILLNEED);
}

/* Whether a page of file fd is in the page cache: mincore over a one-page mapping, which reads nothing
 * (a RWF_NOWAIT read would start read-ahead there).  Where that cannot be told, "yes". */
static int page_cached(int fd, uint64_t off) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return 1;
    off -= off % (uint64_t)pg;
    void *m = mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED, fd, (off_t)off);
    if (m == MAP_FAILED) return 1;
    unsigned char v = 1;
    int in = mincore(m, (size_t)pg, &v) != 0 || (v & 1);
    munmap(m, (size_t)pg);
    return in;
}

/* Whether chunk c's long runs are read with O_DIRECT (see CK_IO_AUTO): always or never when asked
 * for; else for a large item read as long runs (`long_runs`) that is not in the page cache (going by
 * the page in its middle: its headers are read buffered) and a destination whose element 0 is as
 * misaligned to a page as the item's (`skew` = destination address minus file offset of element 0),
 * as O_DIRECT needs. */
int ck_choose_direct(sck_ckpt *ck, const ck_chunk *c, uintptr_t skew, int long_runs) {
    if (ck->io != CK_IO_AUTO) return ck->io == CK_IO_DIRECT;
    if (!long_runs || c->length <= SMALL_ITEM || skew % WS_DIO_ALIGN) return 0;
    return !page_cached(ck->files[c->file].fd, c->offset + c->length / 2);
}

/* preadv until all of iov is read (advancing it), or an error or the end of the file; an error names
 * the item chunk ci of entry ei (formatted only then). */
int ck_preadv_full(const sck_ckpt *ck, size_t ei, size_t ci, int fd, struct iovec *iov, int n, uint64_t off) {
    int rc = sck_preadv_full(fd, iov, n, off, ""); /* the item is named only on error: batches of small items call this often */
    if (rc) {
        char what[4600], msg[5700];
        ck_item_what(ck, &ck->m.e[ei], &ck->m.e[ei].chunks[ci], what, sizeof what);
        snprintf(msg, sizeof msg, "%s%s", what, sck_last_error());
        sck_err_set_raw(msg);
    }
    return rc;
}
