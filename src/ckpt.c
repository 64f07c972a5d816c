/* ckpt.c - reading checkpoints: open, list, and read any box of a tensor from whichever chunks
 * overlap it, touching only the bytes needed. */
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commit.h"
#include "crc32c.h"
#include "torch_item.h"
#include "zip.h"

#define SMALL_ITEM (1u << 20)        /* items up to this size are read whole in one pread */
#define WINDOW_BYTES (16u << 20)     /* read-ahead window for scattered small runs */
#define DIRECT_RUN (1u << 20)        /* runs at least this long are read straight into the caller's buffer */
#define MAX_PKL (64u << 20)
#define CHECK_BUF (4u << 20)         /* read size when checksumming a whole item */

static void ckpt_free_res(sck_ckpt *ck) {
    if (!ck->res) return;
    for (size_t i = 0; i < ck->m.n; i++) free(ck->res[i]);
    free(ck->res);
    ck->res = NULL;
}

void sck_ckpt_close(sck_ckpt *ck) {
    if (!ck) return;
    if (ck->files) {
        for (size_t i = 0; i < ck->m.nfiles; i++)
            if (ck->files[i].fd >= 0) close(ck->files[i].fd);
    }
    free(ck->files);
    ckpt_free_res(ck);
    ck_meta_free(&ck->m);
    free(ck->dir);
    free(ck->order);
    free(ck);
}

/* Saved chunks of one tensor must not overlap: which copy would a read return?  Holes are allowed
 * (reads of covered boxes still work; others fail with SCK_ERR_COVERAGE). */
static int check_overlaps(const sck_ckpt *ck) {
    size_t most = 0;
    for (size_t i = 0; i < ck->m.n; i++)
        if (!ck->m.e[i].is_bytes && ck->m.e[i].nchunks > most) most = ck->m.e[i].nchunks;
    if (most < 2) return SCK_OK;
    sck_box *boxes = malloc(most * sizeof *boxes);
    if (!boxes) return sck_err(SCK_ERR_NOMEM, "%s: out of memory checking chunk overlaps", ck->dir);
    int rc = SCK_OK;
    for (size_t i = 0; i < ck->m.n && !rc; i++) {
        const ck_entry *e = &ck->m.e[i];
        if (e->is_bytes || e->nchunks < 2) continue;
        for (size_t c = 0; c < e->nchunks; c++) boxes[c] = e->chunks[c].box;
        long a, b;
        if (!box_cover_exact(e->ndim, e->shape, boxes, e->nchunks, &a, &b) && a >= 0 && b >= 0)
            rc = sck_err(SCK_ERR_COVERAGE, "%s: tensor '%s': saved chunks %ld and %ld overlap", ck->dir, e->key, a, b);
    }
    free(boxes);
    return rc;
}

int ckpt_from_model(const char *dir, ck_meta *m, sck_ckpt **out) {
    *out = NULL;
    sck_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) {
        ck_meta_free(m);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    ck->m = *m;
    memset(m, 0, sizeof *m);
    ck->dir = sck_strdup(dir);
    ck->files = calloc(ck->m.nfiles ? ck->m.nfiles : 1, sizeof *ck->files);
    ck->res = calloc(ck->m.n ? ck->m.n : 1, sizeof *ck->res);
    if (!ck->dir || !ck->files || !ck->res) {
        sck_ckpt_close(ck);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    for (size_t i = 0; i < ck->m.nfiles; i++) ck->files[i].fd = -1;
    ck->verify = 1;
    int rc = check_overlaps(ck);
    if (rc) {
        sck_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return SCK_OK;
}

int ckpt_from_metadata(const char *dir, const uint8_t *data, size_t n, sck_ckpt **out) {
    char what[4096];
    snprintf(what, sizeof what, "%s/.metadata", dir);
    ck_meta m;
    int rc = dcp_meta_decode(data, n, what, &m);
    if (rc) return rc;
    return ckpt_from_model(dir, &m, out);
}

static int open_path(const char *path, sck_ckpt **out);

int sck_ckpt_open(const char *dir, sck_ckpt **out) {
    if (!dir || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_open: NULL argument");
    *out = NULL;
    /* A crash inside a save's two-rename fallback leaves the checkpoint beside dir (src/commit.h). */
    char *path;
    int rc = commit_resolve(dir, &path);
    if (rc) return rc;
    rc = open_path(path, out);
    free(path);
    return rc;
}

static int open_path(const char *path, sck_ckpt **out) {
    struct stat sb;
    if (stat(path, &sb) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open checkpoint", path);
    char mp[4096];
    if (S_ISDIR(sb.st_mode)) {
        snprintf(mp, sizeof mp, "%s/.metadata", path);
        if (access(mp, F_OK) != 0) {
            snprintf(mp, sizeof mp, "%s/model.safetensors.index.json", path);
            if (access(mp, F_OK) == 0) return ckpt_open_safetensors(path, out);
            return sck_err(SCK_ERR_FORMAT, "%s: no .metadata: not a DCP checkpoint, or an incomplete one", path);
        }
        uint8_t *data;
        size_t n;
        snprintf(mp, sizeof mp, "%s/.metadata", path);
        int rc = sck_read_file(mp, &data, &n);
        if (rc) return rc;
        rc = ckpt_from_metadata(path, data, n, out);
        free(data);
        return rc;
    }
    return ckpt_open_safetensors(path, out);
}

size_t sck_ckpt_count(const sck_ckpt *ck) { return ck ? ck->m.n : 0; }

long sck_ckpt_find(const sck_ckpt *ck, const char *key) { return ck && key ? ck_meta_find(&ck->m, key) : -1; }

int sck_ckpt_entry(const sck_ckpt *ck, size_t i, sck_entry_info *info) {
    if (!ck || !info || i >= ck->m.n) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_entry: index %zu out of range", i);
    const ck_entry *e = &ck->m.e[i];
    memset(info, 0, sizeof *info);
    info->key = e->key;
    info->kind = e->is_bytes ? SCK_ENTRY_BYTES : SCK_ENTRY_TENSOR;
    info->dtype = e->dtype >= 0 ? (sck_dtype)e->dtype : SCK_DTYPE_COUNT;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->nchunks = e->nchunks;
    if (e->is_bytes) {
        info->nbytes = e->nchunks ? e->chunks[0].length : 0;
    } else {
        uint64_t numel = 0;
        sck_numel(e->ndim, e->shape, &numel);
        info->nbytes = numel * (e->dtype >= 0 ? sck_dtype_size((sck_dtype)e->dtype) : 0);
    }
    info->file = e->nchunks ? ck->m.files[e->chunks[0].file] : "";
    return SCK_OK;
}

int sck_ckpt_chunk(const sck_ckpt *ck, size_t i, size_t j, sck_chunk_info *info) {
    if (!ck || !info || i >= ck->m.n || j >= ck->m.e[i].nchunks)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_chunk: index (%zu, %zu) out of range", i, j);
    const ck_chunk *c = &ck->m.e[i].chunks[j];
    memset(info, 0, sizeof *info);
    memcpy(info->offsets, c->box.off, sizeof info->offsets);
    memcpy(info->sizes, c->box.size, sizeof info->sizes);
    info->file = ck->m.files[c->file];
    info->offset = c->offset;
    info->length = c->length;
    return SCK_OK;
}

/* Opens a data file on first use and checks it is a regular file. */
static int get_file(sck_ckpt *ck, uint32_t fi, int *fd, uint64_t *size) {
    ck_file *f = &ck->files[fi];
    if (f->fd < 0) {
        char p[4096];
        int k = snprintf(p, sizeof p, "%s/%s", ck->dir, ck->m.files[fi]);
        if (k < 0 || (size_t)k >= sizeof p) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", ck->m.files[fi]);
        int d = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (d < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open data file", p);
        struct stat sb;
        if (fstat(d, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            close(d);
            return sck_err(SCK_ERR_IO, "%s: not a regular file", p);
        }
        f->fd = d;
        f->size = (uint64_t)sb.st_size;
    }
    *fd = f->fd;
    *size = f->size;
    return SCK_OK;
}

static void item_what(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s: '%s' item at offset %llu", ck->dir, ck->m.files[c->file], e->key, (unsigned long long)c->offset);
}

static int check_window(const sck_ckpt *ck, const ck_entry *e, const ck_chunk *c, uint64_t fsize) {
    if (c->offset > fsize || c->length > fsize - c->offset) {
        return sck_err(SCK_ERR_FORMAT, "%s/%s: '%s' item [%llu, +%llu) extends past the end of the file (%llu bytes)", ck->dir,
                       ck->m.files[c->file], e->key, (unsigned long long)c->offset, (unsigned long long)c->length,
                       (unsigned long long)fsize);
    }
    return SCK_OK;
}

/* Resolves where a chunk's elements are: parses the item's zip and data.pkl (or trusts the raw layout). */
int ckpt_resolve_chunk(sck_ckpt *ck, size_t ei, size_t ci, ck_res **out) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    if (!ck->res[ei]) {
        ck->res[ei] = calloc(e->nchunks, sizeof **ck->res);
        if (!ck->res[ei]) return sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
    }
    ck_res *r = &ck->res[ei][ci];
    *out = r;
    if (r->done) return SCK_OK;
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    if (c->transformed) return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms (e.g. compression), not supported", what);
    int fd;
    uint64_t fsize;
    int rc = get_file(ck, c->file, &fd, &fsize);
    if (rc) return rc;
    if ((rc = check_window(ck, e, c, fsize))) return rc;
    size_t elem = sck_dtype_size((sck_dtype)e->dtype);
    uint64_t numel = box_numel(&c->box), need;
    if (sck_mul_overflow_u64(numel, elem, &need)) return sck_err(SCK_ERR_FORMAT, "%s: chunk too large", what);
    if (c->raw) {
        if (c->length != need)
            return sck_err(SCK_ERR_FORMAT, "%s: holds %llu bytes, expected %llu", what, (unsigned long long)c->length,
                           (unsigned long long)need);
        r->data_off = c->offset;
        box_strides(&c->box, r->strides);
        r->done = 1;
        return SCK_OK;
    }
    zip_dir zd;
    memset(&zd, 0, sizeof zd);
    rc = zip_read_dir(zip_pread_fd, &fd, c->offset, c->length, what, &zd);
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
    if ((rc = sck_pread_full(fd, pkl, pk->size, pk->data_off, what))) goto out;
    if ((rc = ti_decode_tensor_pkl(pkl, pk->size, what, &t))) goto out;
    if (t.dtype != (sck_dtype)e->dtype) {
        rc = sck_err(SCK_ERR_FORMAT, "%s: stored dtype %s differs from metadata dtype %s", what, sck_dtype_name(t.dtype),
                     e->dtype_name);
        goto out;
    }
    if (t.ndim != e->ndim || memcmp(t.size, c->box.size, (size_t)t.ndim * sizeof *t.size)) {
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
    }
    memcpy(r->strides, t.stride, sizeof r->strides);
    const zip_rec *bo = zip_find(&zd, "byteorder");
    if (bo) {
        char b[8] = {0};
        if (bo->size > 6 || (rc = sck_pread_full(fd, b, bo->size, bo->data_off, what))) {
            if (!rc) rc = sck_err(SCK_ERR_FORMAT, "%s: bad byteorder record", what);
            goto out;
        }
        if (!strcmp(b, "big")) r->swap = elem > 1;
        else if (strcmp(b, "little")) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: byteorder record '%s' is neither little nor big", what, b);
            goto out;
        }
    }
    r->done = 1;
out:
    free(pkl);
    zip_dir_free(&zd);
    return rc;
}

static void fmt_dims(char *buf, size_t cap, const sck_box *b) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < b->ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)b->off[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

int ckpt_check_item(sck_ckpt *ck, size_t ei, size_t ci, const uint8_t *known, uint64_t known_off, uint64_t known_len) {
    const ck_entry *e = &ck->m.e[ei];
    const ck_chunk *c = &e->chunks[ci];
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    int fd;
    uint64_t fsize;
    int rc = get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = check_window(ck, e, c, fsize))) return rc;
    uint64_t end = c->offset + c->length, pos = c->offset;
    uint8_t *buf = NULL;
    uint32_t crc = 0;
    while (pos < end && !rc) {
        if (known && pos >= known_off && pos < known_off + known_len) {
            uint64_t k = known_off + known_len - pos;
            if (k > end - pos) k = end - pos;
            crc = sck_crc32c(crc, known + (pos - known_off), (size_t)k);
            pos += k;
            continue;
        }
        uint64_t k = end - pos < CHECK_BUF ? end - pos : CHECK_BUF;
        if (known && known_off > pos && known_off - pos < k) k = known_off - pos;
        if (!buf && !(buf = malloc(c->length < CHECK_BUF ? c->length : CHECK_BUF))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a checksum buffer", what);
        if (!(rc = sck_pread_full(fd, buf, (size_t)k, pos, what))) crc = sck_crc32c(crc, buf, (size_t)k);
        pos += k;
    }
    free(buf);
    if (!rc && c->has_crc && crc != c->crc32c) {
        char at[400] = "";
        if (!e->is_bytes) {
            char dims[360];
            fmt_dims(dims, sizeof dims, &c->box);
            snprintf(at, sizeof at, " (chunk %zu at %s)", ci, dims);
        }
        rc = sck_err(SCK_ERR_CHECKSUM, "%s%s: bytes [%llu, %llu) have CRC-32C 0x%08x, .metadata records 0x%08x", what, at,
                     (unsigned long long)c->offset, (unsigned long long)end, crc, c->crc32c);
    }
    return rc;
}

/* Copies runs from the file into the destination, through a read-ahead window for small runs. */
typedef struct run_ctx {
    int fd;
    const char *what;
    uint64_t base;          /* absolute offset of the chunk view's element 0 */
    uint8_t *dst;
    uint8_t *win;
    uint64_t win_off, win_len, win_cap;  /* win_cap: bytes allocated, at most the item's length */
    uint64_t limit;         /* end of the item window: read-ahead never goes past it */
    size_t elem;
    int swap;
} run_ctx;

static void swap_elems(uint8_t *p, uint64_t nbytes, size_t elem) {
    for (uint64_t i = 0; i + elem <= nbytes; i += elem) {
        for (size_t a = 0, b = elem - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}

static int copy_run(void *vctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes) {
    run_ctx *r = vctx;
    uint64_t abs = r->base + src_off;
    uint8_t *d = r->dst + dst_off;
    if (nbytes >= DIRECT_RUN || !r->win || nbytes > r->win_cap) {
        int rc = sck_pread_full(r->fd, d, nbytes, abs, r->what);
        if (rc) return rc;
    } else {
        if (abs < r->win_off || abs + nbytes > r->win_off + r->win_len) {
            uint64_t len = r->win_cap;
            if (len > r->limit - abs) len = r->limit - abs;
            if (len < nbytes) len = nbytes;
            int rc = sck_pread_full(r->fd, r->win, len, abs, r->what);
            if (rc) return rc;
            r->win_off = abs;
            r->win_len = len;
        }
        memcpy(d, r->win + (abs - r->win_off), nbytes);
    }
    if (r->swap) swap_elems(d, nbytes, r->elem);
    return 0;
}

/* Counts runs so we only allocate a read-ahead window when there is more than one; keeps the first. */
typedef struct run_count {
    uint64_t n, src, dst, len;
} run_count;

static int count_run(void *vctx, uint64_t s, uint64_t d, uint64_t n) {
    run_count *rc = vctx;
    if (rc->n++ == 0) {
        rc->src = s;
        rc->dst = d;
        rc->len = n;
    }
    return 0;
}

static int read_overlap(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *want, const sck_box *ov, void *dst) {
    ck_entry *e = &ck->m.e[ei];
    ck_chunk *c = &e->chunks[ci];
    ck_res *r = NULL;
    int rc = ckpt_resolve_chunk(ck, ei, ci, &r);
    if (rc && ck->verify && c->has_crc) {
        /* Undecodable: if the bytes are not what was saved, say that instead. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sck_last_error());
        if (ckpt_check_item(ck, ei, ci, NULL, 0, 0) == SCK_ERR_CHECKSUM) return SCK_ERR_CHECKSUM;
        sck_err_set_raw(msg);
    }
    if (rc) return rc;
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    run_ctx rx;
    memset(&rx, 0, sizeof rx);
    rx.fd = ck->files[c->file].fd;
    rx.what = what;
    rx.base = r->data_off;
    rx.dst = dst;
    rx.limit = c->offset + c->length;
    rx.elem = sck_dtype_size((sck_dtype)e->dtype);
    rx.swap = r->swap;
    run_count runs;
    memset(&runs, 0, sizeof runs);
    box_runs(&c->box, r->strides, want, ov, rx.elem, count_run, &runs);
    /* Checksums cover whole items.  When this read brings the chunk's whole payload in one run (the
     * same sharding as the save), only the rest of the item is read again to check it; otherwise the
     * item is checked first. */
    int check = ck->verify && c->has_crc && !r->verified;
    int after = check && !r->swap && runs.n == 1 && runs.src == 0 && runs.len == box_numel(&c->box) * rx.elem;
    if (check && !after) {
        if ((rc = ckpt_check_item(ck, ei, ci, NULL, 0, 0))) return rc;
        r->verified = 1;
    }
    if (runs.n > 1) {
        /* No bigger than the item: small chunks read often must not cost a 16 MiB buffer each. */
        rx.win_cap = c->length < WINDOW_BYTES ? c->length : WINDOW_BYTES;
        rx.win = malloc(rx.win_cap ? rx.win_cap : 1);
        if (!rx.win) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for a read window", what);
    }
    rc = box_runs(&c->box, r->strides, want, ov, rx.elem, copy_run, &rx);
    free(rx.win);
    if (!rc && after) {
        rc = ckpt_check_item(ck, ei, ci, (const uint8_t *)dst + runs.dst, r->data_off, runs.len);
        r->verified = !rc;
    }
    return rc;
}

int ckpt_read_box(sck_ckpt *ck, size_t ei, const sck_box *want, void *dst) {
    ck_entry *e = &ck->m.e[ei];
    if (e->is_bytes) return sck_err(SCK_ERR_MISMATCH, "'%s': is a bytes entry, not a tensor", e->key);
    if (e->dtype < 0) return sck_err(SCK_ERR_UNSUPPORTED, "'%s': stored dtype %s is not supported", e->key, e->dtype_name);
    if (want->ndim != e->ndim || !box_within(want, e->shape))
        return sck_err(SCK_ERR_INVALID_ARG, "'%s': requested box does not fit the stored shape", e->key);
    uint64_t need = box_numel(want), got = 0;
    if (need == 0) return SCK_OK;
    for (size_t ci = 0; ci < e->nchunks; ci++) {
        sck_box ov;
        if (!box_intersect(&e->chunks[ci].box, want, &ov)) continue;
        int rc = read_overlap(ck, ei, ci, want, &ov, dst);
        if (rc) return rc;
        got += box_numel(&ov);
    }
    if (got != need)
        return sck_err(SCK_ERR_COVERAGE, "'%s': saved chunks cover %llu of the %llu requested elements (%s)", e->key,
                       (unsigned long long)got, (unsigned long long)need,
                       got < need ? "the checkpoint has holes" : "saved chunks overlap");
    return SCK_OK;
}

int sck_ckpt_read_box(sck_ckpt *ck, size_t i, const int64_t *offsets, const int64_t *sizes, void *dst) {
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

int ckpt_read_item(sck_ckpt *ck, size_t ei, uint8_t **data, size_t *n) {
    ck_entry *e = &ck->m.e[ei];
    *data = NULL;
    *n = 0;
    if (!e->is_bytes || e->nchunks != 1) return sck_err(SCK_ERR_MISMATCH, "'%s': is a tensor, not a bytes entry", e->key);
    ck_chunk *c = &e->chunks[0];
    char what[4600];
    item_what(ck, e, c, what, sizeof what);
    if (c->transformed) return sck_err(SCK_ERR_UNSUPPORTED, "%s: stored with DCP transforms, not supported", what);
    int fd;
    uint64_t fsize;
    int rc = get_file(ck, c->file, &fd, &fsize);
    if (rc || (rc = check_window(ck, e, c, fsize))) return rc;
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

int sck_ckpt_read_bytes(sck_ckpt *ck, size_t i, void **data, size_t *n, sck_value **value) {
    if (!ck || i >= ck->m.n || !data || !n || !value)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_read_bytes: bad argument");
    *data = NULL;
    *n = 0;
    *value = NULL;
    uint8_t *raw;
    size_t len;
    int rc = ckpt_read_item(ck, i, &raw, &len);
    if (rc) return rc;
    /* A torch.save archive (zip magic) holding data.pkl is decoded; anything else is raw bytes. */
    if (len >= 4 && !memcmp(raw, "PK\x03\x04", 4)) {
        zip_mem zm = {raw, len};
        zip_dir zd;
        char what[4600];
        item_what(ck, &ck->m.e[i], &ck->m.e[i].chunks[0], what, sizeof what);
        rc = zip_read_dir(zip_pread_mem, &zm, 0, len, what, &zd);
        if (rc == SCK_OK) {
            const zip_rec *pk = zip_find(&zd, "data.pkl");
            if (!pk) rc = sck_err(SCK_ERR_FORMAT, "%s: archive has no data.pkl", what);
            else rc = ti_decode_value_pkl(raw + pk->data_off, pk->size, what, value);
            zip_dir_free(&zd);
        }
        free(raw);
        return rc;
    }
    *data = raw;
    *n = len;
    return SCK_OK;
}
