/* ckpt_index.c - the model of an open checkpoint: its entries, chunks and files, built from .metadata (or a
 * safetensors header), checked, shared read-only between thread ranks, and what sck_ckpt_entry/_chunk/
 * _find/_entry_path report. */
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

struct ck_shared {
    ck_meta m;
    uint64_t dir_dev, dir_ino;  /* the opener's identity of the directory (sck_ckpt's) */
    int dir_known;
    atomic_int refs;
};

static void ckpt_free_res(sck_ckpt *ck) {
    for (int i = 0; i < 3; i++) {
        free(ck->runbuf[i].r);
        ck->runbuf[i] = (ck_runbuf){NULL, 0};
    }
    free(ck->res);
    ck->res = NULL;
    free(ck->strides);
    ck->strides = NULL;
    ck->nstrides = ck->capstrides = 0;
    sck_huge_free(ck->res_pool, ck->res_pool_n, sizeof *ck->res_pool);
    ck->res_pool = NULL;
    free(ck->zrecs);
    ck->zrecs = NULL;
    ck->nzrecs = ck->capzrecs = 0;
    free(ck->zrec_of);
    ck->zrec_of = NULL;
}

void sck_ckpt_close(sck_ckpt *ck) {
    if (!ck) return;
    if (ck->files) {
        for (size_t i = 0; i < ck->m.nfiles; i++)
            if (ck->files[i].fd >= 0) io_close_quiet(ck->files[i].fd, ck->m.files[i]);
        for (size_t i = 0; i < ck->m.nfiles; i++) {
            if (ck->files[i].dfd >= 0) io_close_quiet(ck->files[i].dfd, ck->m.files[i]);
            if (ck->files[i].sfd >= 0) io_close_quiet(ck->files[i].sfd, ck->m.files[i]);
        }
    }
    free(ck->files);
    rc_free(&ck->rc);
    rp_free(ck->rp);
    ckpt_free_res(ck);
    free(ck->peer_checks);
    sck_big_free(ck->hands);
    for (size_t i = 0; i < ck->ncombs; i++) free(ck->combs[i].r);
    free(ck->combs);
    free(ck->segs);
    if (ck->shared) ckpt_shared_release(ck->shared, 1);
    else ck_meta_free(&ck->m);
    free(ck->dir);
    free(ck->order);
    free(ck->spans);
    free(ck->bigs);
    sck_big_free(ck->scratch);
    sck_value_free(ck->meta_pt);
    free(ck->meta_order);
    free(ck->meta_nbytes);
    free(ck);
}

/* Whether entry e's chunks are non-empty row blocks, in order, each starting where the one before
 * ends: they cannot overlap.  How a row-split save stores every tensor; checked without copying a box. */
static int row_blocks_in_order(const ck_entry *e) {
    if (e->ndim < 1) return 0;
    int64_t next = 0;
    for (size_t c = 0; c < e->nchunks; c++) {
        const int64_t *off = ck_chunk_off(e, c), *size = ck_chunk_size(e, c);
        if (off[0] != next || size[0] <= 0) return 0;
        for (int d = 1; d < e->ndim; d++)
            if (off[d] != 0 || size[d] != e->shape[d]) return 0;
        next += size[0];
    }
    return 1;
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
        if (e->is_bytes || e->nchunks < 2 || row_blocks_in_order(e)) continue;
        for (size_t c = 0; c < e->nchunks; c++) ck_chunk_box(e, c, &boxes[c]);
        long a, b;
        if (!box_cover_exact(e->ndim, e->shape, boxes, e->nchunks, &a, &b) && a >= 0 && b >= 0)
            rc = sck_err(SCK_ERR_COVERAGE, "%s: tensor '%s': saved chunks %ld and %ld overlap", ck->dir, e->key, a, b);
    }
    free(boxes);
    return rc;
}

/* A new sck_ckpt for dir on model m (a struct copy: the caller settles who owns the model). */
static int ckpt_alloc(const char *dir, const ck_meta *m, sck_ckpt **out) {
    sck_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    ck->m = *m;
    ck->dir = sck_strdup(dir);
    ck->files = calloc(m->nfiles ? m->nfiles : 1, sizeof *ck->files);
    ck->res = calloc(m->n ? m->n : 1, sizeof *ck->res);
    if (!ck->dir || !ck->files || !ck->res) {
        free(ck->dir);
        free(ck->files);
        free(ck->res);
        free(ck);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    for (size_t i = 0; i < m->nfiles; i++) ck->files[i].fd = ck->files[i].dfd = ck->files[i].sfd = -1;
    struct stat sb;
    if (io_stat(dir, &sb) == 0) {
        ck->dir_dev = (uint64_t)sb.st_dev;
        ck->dir_ino = (uint64_t)sb.st_ino;
        ck->dir_known = 1;
    }
    rc_init(&ck->rc);
    ck->verify = 1;
    ck->nranks = 1;
    ck->advised_off = UINT64_MAX; /* nothing asked for yet */
    *out = ck;
    return SCK_OK;
}

/* m->file_end, m->item_base and each chunk's `tail`, computed once: every rank's reading order and
 * check plan use them, and thread ranks share the model (ckpt_share). */
static int model_index(const char *dir, ck_meta *m) {
    uint64_t *ext = calloc(m->nfiles ? m->nfiles : 1, sizeof *ext);
    size_t *base = malloc((m->n + 1) * sizeof *base);
    if (!ext || !base) {
        free(ext);
        free(base);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    base[0] = 0;
    for (size_t i = 0; i < m->n; i++) {
        base[i + 1] = base[i] + m->e[i].nchunks;
        const ck_entry *e = &m->e[i];
        for (size_t k = 0; k < e->nchunks; k++) {
            ck_chunk *c = &e->chunks[k];
            if (c->file < m->nfiles && c->offset + c->length > ext[c->file]) ext[c->file] = c->offset + c->length;
            /* Where our save laid the item out, its headers and zip directory are known to the byte:
             * reading them costs a page each, not a 64 KiB guess (ck_fill_range, ck_advise_headers). */
            uint64_t plen = c->payload && !e->is_bytes && e->dtype >= 0 ? sck_dtype_size((sck_dtype)e->dtype) : 0;
            for (int d = 0; plen && d < e->ndim; d++) plen *= (uint64_t)ck_chunk_size(e, k)[d];
            c->tail = plen && c->payload + plen < c->length && c->length - c->payload - plen <= UINT32_MAX
                          ? (uint32_t)(c->length - c->payload - plen) : 0;
        }
    }
    free(m->file_end);
    free(m->item_base);
    m->file_end = ext;
    m->item_base = base;
    return SCK_OK;
}

int ckpt_from_model(const char *dir, ck_meta *m, int checked, sck_ckpt **out) {
    *out = NULL;
    sck_ckpt *ck;
    int rc = model_index(dir, m);
    if (rc) {
        ck_meta_free(m);
        return rc;
    }
    rc = ckpt_alloc(dir, m, &ck);
    if (rc) {
        ck_meta_free(m);
        return rc;
    }
    memset(m, 0, sizeof *m);
    if ((rc = checked ? SCK_OK : check_overlaps(ck))) {
        sck_ckpt_close(ck);
        return rc;
    }
    *out = ck;
    return SCK_OK;
}

int ckpt_share(sck_ckpt *ck, int extra, ck_shared **out) {
    ck_shared *s = malloc(sizeof *s);
    if (!s) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", ck->dir);
    s->m = ck->m;
    s->dir_dev = ck->dir_dev, s->dir_ino = ck->dir_ino, s->dir_known = ck->dir_known;
    atomic_init(&s->refs, 1 + extra);
    ck->shared = *out = s;
    return SCK_OK;
}

int ckpt_from_shared(const char *dir, ck_shared *s, sck_ckpt **out) {
    *out = NULL;
    int rc = ckpt_alloc(dir, &s->m, out);
    if (rc) ckpt_shared_release(s, 1);
    else {
        (*out)->shared = s;
        ckpt_set_dir_id(*out, s->dir_dev, s->dir_ino, s->dir_known);
    }
    return rc;
}

void ckpt_shared_release(ck_shared *s, int n) {
    if (n > 0 && atomic_fetch_sub(&s->refs, n) == n) {
        ck_meta_free(&s->m);
        free(s);
    }
}

void ckpt_set_dir_id(sck_ckpt *ck, uint64_t dev, uint64_t ino, int known) {
    ck->dir_dev = dev, ck->dir_ino = ino, ck->dir_known = known;
}

/* ckpt_open_dcp's reading and decoding. */
static int open_dcp(const char *dir, sck_ckpt **out, uint8_t **wire, size_t *wire_len) {
    char what[4096];
    ck_meta m;
    uint8_t *w, *data;
    size_t wn, n;
    *out = NULL;
    if (wire) *wire = NULL;
    int rc = meta_side_open(dir, &w, &wn, &data, &n);
    if (rc) return rc;
    if (w) {
        snprintf(what, sizeof what, "%s/%s", dir, META_SIDE_NAME);
        if ((rc = meta_wire_decode(w, wn, what, &m)) == SCK_OK) {
            sck_big_free(data);
            if ((rc = ckpt_from_model(dir, &m, 0, out)) || (rc = ckpt_attach_meta_pt(*out))) {
                sck_ckpt_close(*out);
                *out = NULL;
                sck_big_free(w);
                return rc;
            }
            (*out)->from_side = 1;
            if (wire) *wire = w, *wire_len = wn;
            else sck_big_free(w);
            return SCK_OK;
        }
        sck_big_free(w); /* not this build's layout after all: the pickle says what is there */
        sck_err_clear();
    }
    snprintf(what, sizeof what, "%s/.metadata", dir);
    if (!data && (rc = sck_read_file_own(what, &data, &n))) return rc;
    rc = dcp_meta_decode(data, n, what, &m);
    sck_big_free(data);
    if (!rc && !(rc = ckpt_from_model(dir, &m, 0, out)) && (rc = ckpt_attach_meta_pt(*out))) {
        sck_ckpt_close(*out);
        *out = NULL;
    }
    return rc;
}

int ckpt_open_dcp(const char *dir, sck_ckpt **out, uint8_t **wire, size_t *wire_len) {
    /* the directory as it is before .metadata is read: a save swapping it in later changes this */
    struct stat sb;
    int known = io_stat(dir, &sb) == 0;
    int rc = open_dcp(dir, out, wire, wire_len);
    if (!rc) ckpt_set_dir_id(*out, known ? (uint64_t)sb.st_dev : 0, known ? (uint64_t)sb.st_ino : 0, known);
    return rc;
}

size_t sck_ckpt_count(const sck_ckpt *ck) { return ck ? ckpt_count(ck) : 0; }

long sck_ckpt_find(const sck_ckpt *ck, const char *key) {
    if (!ck || !key) return -1;
    long i = ck_meta_find(&ck->m, key);
    return i >= 0 ? i : ckpt_meta_find(ck, key);
}

int sck_ckpt_entry_path(const sck_ckpt *ck, size_t i, sck_value **out) {
    if (!out || (*out = NULL, !ck) || i >= ckpt_count(ck))
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_entry_path: index %zu out of range", i);
    if (i >= ck->m.n) { /* meta.pt's dict keys are the state's top level */
        sck_value *l = sck_value_list();
        if (l && sck_value_list_append(l, sck_value_string(ckpt_key(ck, i)))) {
            sck_value_free(l);
            l = NULL;
        }
        *out = l;
    } else {
        const ck_entry *e = &ck->m.e[i];
        *out = kp_to_value(e->path, e->path_len, e->key);
    }
    return *out ? SCK_OK : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", ckpt_key(ck, i));
}

int sck_ckpt_entry(const sck_ckpt *ck, size_t i, sck_entry_info *info) {
    if (!ck || !info || i >= ckpt_count(ck)) return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_entry: index %zu out of range", i);
    memset(info, 0, sizeof *info);
    if (i >= ck->m.n) {
        info->key = ckpt_key(ck, i);
        info->kind = SCK_ENTRY_BYTES;
        info->dtype = SCK_DTYPE_COUNT;
        info->nchunks = 1;
        info->nbytes = ck->meta_nbytes[ck->meta_order[i - ck->m.n]];
        info->file = META_PT_NAME;
        return SCK_OK;
    }
    const ck_entry *e = &ck->m.e[i];
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
    if (ck && info && i >= ck->m.n && i < ckpt_count(ck) && j == 0) { /* the whole of meta.pt */
        memset(info, 0, sizeof *info);
        info->file = META_PT_NAME;
        return SCK_OK;
    }
    if (!ck || !info || i >= ck->m.n || j >= ck->m.e[i].nchunks)
        return sck_err(SCK_ERR_INVALID_ARG, "sck_ckpt_chunk: index (%zu, %zu) out of range", i, j);
    const ck_entry *e = &ck->m.e[i];
    const ck_chunk *c = &e->chunks[j];
    memset(info, 0, sizeof *info);
    for (int d = 0; d < e->ndim; d++) info->offsets[d] = ck_chunk_off(e, j)[d], info->sizes[d] = ck_chunk_size(e, j)[d];
    info->file = ck->m.files[c->file];
    info->offset = c->offset;
    info->length = c->length;
    return SCK_OK;
}
