/* load_device.c - a load's device pieces: read block by block into host staging (2 buffers, pinned
 * where the device ops allocate), each block then copied up to the device while the next is read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load/ckpt.h"
#include "load/load_device.h"

#define LD_SEGS 64 /* device pieces (or parts) per staging block */

/* A part of a device piece in a staging block: its bytes at `at` go to `dev`. */
typedef struct ld_seg {
    uint8_t *dev;
    size_t at, n;
    const char *key;
    uint64_t piece_off;
} ld_seg;

typedef struct ld_ctx {
    sck_ckpt *ck;
    const sck_device_ops *ops;
    void *dctx;
    uint8_t *buf[2];
    size_t cap;              /* bytes of each buffer */
    int slot;                /* the buffer being filled */
    size_t used;             /* its bytes */
    ld_seg seg[LD_SEGS];
    size_t nseg;
    sck_box box[LD_SEGS * 2 * SCK_MAX_DIMS];
    ck_want want[LD_SEGS * 2 * SCK_MAX_DIMS];
    size_t nwant;
    int inflight;            /* copies to the device not yet waited for ... */
    const char *wkey;        /* ... the first of them: its key and byte offset, and the bytes of all */
    uint64_t woff, wn;
} ld_ctx;

static int dev_error(int rc, const char *what, const char *key, uint64_t off, uint64_t n) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sck_last_error());
    if (rc >= 0 || rc < SCK_ERR_BUSY) rc = SCK_ERR_IO;
    return sck_err(rc, "'%s': device %s of %llu bytes at byte offset %llu failed: %s", key, what, (unsigned long long)n,
                   (unsigned long long)off, *msg ? msg : "(no message)");
}

/* Waits for the copies issued from the other buffer (a failure there names the first of them). */
static int wait_copies(ld_ctx *x) {
    if (!x->inflight || !x->ops->wait) return SCK_OK;
    x->inflight = 0;
    sck_err_clear();
    int rc = x->ops->wait(x->dctx);
    return rc ? dev_error(rc, "copy to device (a block from here, waited for)", x->wkey, x->woff, x->wn) : SCK_OK;
}

/* The block being filled: read from the files, then (once the other buffer's copies are done) its
 * parts copied to the device, and the next block goes to the other buffer. */
static int flush_block(ld_ctx *x) {
    if (!x->nseg) return SCK_OK;
    int rc = ckpt_read_boxes(x->ck, x->want, x->nwant);
    if (!rc) rc = wait_copies(x);
    x->wkey = x->seg[0].key, x->woff = x->seg[0].piece_off, x->wn = x->used;
    for (size_t i = 0; i < x->nseg && !rc; i++) {
        const ld_seg *s = &x->seg[i];
        sck_err_clear();
        rc = x->ops->copy_to_device(x->dctx, s->dev, x->buf[x->slot] + s->at, s->n);
        if (rc) rc = dev_error(rc, "copy to device", s->key, s->piece_off, s->n);
        x->inflight = 1;
    }
    x->slot ^= 1;
    x->used = x->nseg = x->nwant = 0;
    return rc;
}

/* Adds elements [begin, begin+count) of piece pc (of model entry ei) to the block. */
static int add_part(ld_ctx *x, const st_entry *e, const st_piece *pc, size_t ei, int64_t begin, int64_t count) {
    size_t elem = sck_dtype_size(e->dtype);
    sck_box *b = &x->box[x->nwant];
    int nb = box_from_flat(pc->box.ndim, pc->box.size, begin, count, b);
    if (nb < 0) return sck_err(SCK_ERR_INVALID_ARG, "'%s': internal: a device block outside its piece", e->key);
    uint8_t *dst = x->buf[x->slot] + x->used;
    for (int k = 0; k < nb; k++) {
        for (int d = 0; d < pc->box.ndim; d++) b[k].off[d] += pc->box.off[d];
        x->want[x->nwant + (size_t)k] = (ck_want){ei, &b[k], dst};
        dst += box_numel(&b[k]) * elem;
    }
    x->nwant += (size_t)nb;
    x->seg[x->nseg++] = (ld_seg){(uint8_t *)pc->data + (uint64_t)begin * elem, x->used, (size_t)count * elem, e->key,
                                 (uint64_t)begin * elem};
    x->used += (size_t)count * elem;
    return SCK_OK;
}

static int read_piece(ld_ctx *x, const st_entry *e, const st_piece *pc, size_t ei) {
    size_t elem = sck_dtype_size(e->dtype);
    int64_t total = (int64_t)box_numel(&pc->box), at = 0;
    int rc = SCK_OK;
    while (at < total && !rc) {
        int64_t room = (int64_t)((x->cap - x->used) / elem);
        if (room == 0 || x->nseg == LD_SEGS) {
            rc = flush_block(x);
            continue;
        }
        int64_t k = total - at < room ? total - at : room;
        rc = add_part(x, e, pc, ei, at, k);
        at += k;
    }
    return rc;
}

/* Pinned buffers come from (and stay in) the state's pool for the next load or save: pinning memory
 * and faulting it in cost more than a small load's copies.  Pageable ones are the load's own. */
static uint8_t *stage_get(sck_state *st, int b, size_t n) {
    ws_pool *p = &st->dev_stage;
    if (!p->alloc) return aligned_alloc(4096, n);
    if (p->size != n) ws_pool_free(p), p->size = n;
    if (!p->buf[b]) p->buf[b] = p->alloc(p->ctx, n);
    return p->buf[b];
}

static void stage_put(sck_state *st, uint8_t *buf) {
    if (!st->dev_stage.alloc) free(buf);
}

int ld_read_device(sck_ckpt *ck, sck_state *st, const long *found, unsigned staging_mib) {
    if (!st->ndev) return SCK_OK;
    const sck_device_ops *ops = st->dev_ops;
    if (!ops) return sck_err(SCK_ERR_INVALID_ARG, "device pieces in a state without device operations");
    ld_ctx *x = calloc(1, sizeof *x);
    if (!x) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for device reads", ck->dir);
    x->ck = ck;
    x->ops = ops;
    x->dctx = st->dev_ctx;
    x->cap = (size_t)(staging_mib ? staging_mib : 64) << 20;
    int rc = SCK_OK;
    for (int b = 0; b < 2 && !rc; b++)
        if (!(x->buf[b] = stage_get(st, b, x->cap)))
            rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory for a %zu-byte staging buffer of device reads", ck->dir, x->cap);
    /* The entries load_prepare passed (marked loaded), in state order. */
    for (size_t i = 0; i < st->n && !rc; i++) {
        const st_entry *e = &st->e[i];
        if (e->kind != ENT_TENSOR || !e->loaded || found[i] < 0) continue;
        for (size_t p = 0; p < e->npieces && !rc; p++)
            if (e->pieces[p].dev) rc = read_piece(x, e, &e->pieces[p], (size_t)found[i]);
    }
    if (!rc) rc = flush_block(x);
    if (rc) { /* nothing may still read a staging buffer; the first error's message stays */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", sck_last_error());
        wait_copies(x);
        sck_err_set_raw(msg);
    } else {
        rc = wait_copies(x);
    }
    for (int b = 0; b < 2; b++) stage_put(st, x->buf[b]);
    free(x);
    return rc;
}
