/* save_write.c - this rank's items of a save: encoded up front (and, for an async save, their tensor
 * data copied into the snapshot), then written as torch.save archives through the background writer
 * (src/wstream.c).  Tensor payloads are written straight from the caller's buffers (or the snapshot):
 * the only copies are of headers and small pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "io/copy_par.h"
#include "base/crc32c.h"
#include "save/save_job.h"
#include "format/torch_item.h"
#include "io/wstream.h"
#include "format/zip.h"

#define ITEM_ALIGN 64   /* torch.save's record alignment */
/* Payloads this large start on a 4 KiB boundary in the file (O_DIRECT reads and writes, mmap); the
 * padding costs at most 1.6% of such a payload. */
#define PAGE_ALIGN_MIN WS_REF_MIN
/* Payloads this large start on a 32 KiB boundary (again at most 1.6% of padding): disks need not work
 * in 4 KiB blocks.  On a virtio disk (docs/PERFORMANCE.md) 16 MiB O_DIRECT writes at file offsets 4 KiB
 * off a 64 KiB boundary took 10% longer than aligned ones, fsync included, and reads 12% longer; at
 * 32 KiB off, 1 to 3%.  32 KiB is the most a zip extra field's padding can always reach. */
#define BLOCK_ALIGN_MIN ((uint64_t)2 << 20)
#define BLOCK_ALIGN (32u << 10)

static uint32_t payload_align(uint64_t plen) {
    return plen >= BLOCK_ALIGN_MIN ? BLOCK_ALIGN : plen >= PAGE_ALIGN_MIN ? WS_ALIGN : ITEM_ALIGN;
}

void save_free_items(save_job *j) {
    sck_buf_free(&j->pkls);
    free(j->src);
    j->src = NULL;
    free(j->recs);
    j->recs = NULL;
    free(j->patches);
    j->patches = NULL;
    j->npatches = j->patch_cap = 0;
}

/* Grows the snapshot to hold n bytes.  Huge pages: first-touch faults are most of a fresh buffer's cost. */
void save_snapshot_free(save_snapshot *s) {
    if (s->mem && s->ops) s->ops->host_free(s->ctx, s->mem, s->cap);
    else if (s->mem) munmap(s->mem, s->cap);
    s->mem = NULL;
    s->cap = 0;
    s->ops = NULL;
    s->ctx = NULL;
}

/* A state with device pieces gets a pinned snapshot from its ops (host_alloc, where they have one), so
 * that the copies from the device run at full speed; a snapshot from other memory is replaced. */
static int snapshot_reserve(save_snapshot *s, size_t n, const sck_device_ops *ops, void *ctx) {
    if (s->cap >= n && s->ops == ops && s->ctx == ctx) return SCK_OK;
    save_snapshot_free(s);
    void *m = ops ? ops->host_alloc(ctx, n) : mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ops && !m) return sck_err(SCK_ERR_NOMEM, "out of pinned memory (the device ops' host_alloc) for a %zu-byte snapshot of the state", n);
    if (m == MAP_FAILED) return sck_err(SCK_ERR_NOMEM, "out of memory for a %zu-byte snapshot of the state", n);
    if (!ops) madvise(m, n, MADV_HUGEPAGE); /* advice only */
    s->mem = m;
    s->cap = n;
    s->ops = ops;
    s->ctx = ctx;
    return SCK_OK;
}

/* Bytes of a piece of entry e. */
static uint64_t piece_bytes(const st_entry *e, const st_piece *pc) { return box_numel(&pc->box) * sck_dtype_size(e->dtype); }

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* 1 if a and b would give the same local plan (everything plan_encode_local sends). */
static int same_structure(const st_entry *a, const st_entry *b) {
    return a->kind == b->kind && a->present == b->present && a->dtype == b->dtype && a->replicated == b->replicated &&
           state_same_boxes(a, b) && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) && !strcmp(a->key, b->key) &&
           a->path_len == b->path_len && !!a->path == !!b->path && (!a->path || !memcmp(a->path, b->path, a->path_len));
}

/* Snapshot layout: tensor data (pieces of 256 KiB or more page-aligned, as in the file), then the
 * entry table, the pieces, the keys and the blobs. */
void save_copy_measure(const sck_state *st, const sck_state *old, int copy_data, copy_layout *L) {
    size_t data = 0, pieces = 0, keys = 0, blobs = 0;
    int same = old && old->n == st->n;
    for (size_t i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        if (same && !same_structure(e, &old->e[i])) same = 0;
        keys += strlen(e->key) + 1 + (e->path ? e->path_len : 0); /* a path lies after its key */
        pieces += e->npieces;
        if (e->kind == ENT_BLOB && e->present) blobs += e->blob_n;
        for (size_t k = 0; copy_data && e->kind == ENT_TENSOR && k < e->npieces; k++) {
            uint64_t nb = piece_bytes(e, &e->pieces[k]);
            data = align_up(data, payload_align(nb)) + nb;
        }
    }
    L->entries = align_up(data, 64);
    L->pieces = align_up(L->entries + st->n * sizeof(st_entry), 64);
    L->keys = L->pieces + pieces * sizeof(st_piece);
    L->blobs = L->keys + keys;
    L->total = L->blobs + blobs;
    L->same = same;
}

int save_copy_state(const sck_state *st, const copy_layout *L, int copy_data, int threads, int unchanged, save_keep *keep) {
    save_snapshot *snap = &keep->snap;
    /* L is the copy's layout, so the snapshot that holds the copy is large enough; checked anyway. */
    if (unchanged && snap->cap >= L->total && keep->copy->e == (st_entry *)(void *)(snap->mem + L->entries)) {
        /* Entries, pieces, keys, blobs and values are still what they were: blobs and values change
         * only with a new stamp (sck_state_add_blob copies; a load replaces them). */
        copy_parallel(keep->copy_ops, keep->copy_nops, threads);
        return save_dev_snapshot(st, keep);
    }
    sck_state_free(keep->copy); /* its structure is about to be overwritten */
    keep->copy = NULL;
    keep->copy_stamp = 0;
    free(keep->copy_ops);
    keep->copy_ops = NULL;
    keep->copy_nops = 0;
    free(keep->dev_ops);
    free(keep->dev_keys);
    keep->dev_ops = NULL;
    keep->dev_keys = NULL;
    keep->dev_nops = 0;
    const sck_device_ops *pin = copy_data && st->ndev && st->dev_ops && st->dev_ops->host_alloc ? st->dev_ops : NULL;
    int rc = snapshot_reserve(snap, L->total ? L->total : 1, pin, pin ? st->dev_ctx : NULL);
    sck_state *c = rc ? NULL : calloc(1, sizeof *c);
    if (!rc && !c) rc = sck_err(SCK_ERR_NOMEM, "out of memory copying the state");
    if (rc) return rc;
    /* The tensor bytes are copied after the structure, split over `threads` (copy_parallel); the
     * list of copies is kept for the next save of the same state.  Without memory for it, each piece
     * is copied where it comes. */
    size_t npieces = 0, nops = 0;
    for (size_t i = 0; copy_data && i < st->n; i++) npieces += st->e[i].kind == ENT_TENSOR ? st->e[i].npieces : 0;
    copy_op *ops = npieces ? malloc(npieces * sizeof *ops) : NULL;
    size_t ndev = copy_data ? st->ndev : 0, dn = 0;
    copy_op *dops = ndev ? malloc(ndev * sizeof *dops) : NULL;
    const char **dkeys = ndev ? malloc(ndev * sizeof *dkeys) : NULL;
    if (ndev && (!dops || !dkeys)) { /* device pieces can only be copied from a list */
        free(ops);
        free(dops);
        free(dkeys);
        free(c);
        return sck_err(SCK_ERR_NOMEM, "out of memory copying the state");
    }
    uint8_t *m = snap->mem;
    st_entry *ce = (st_entry *)(void *)(m + L->entries);
    st_piece *cp = (st_piece *)(void *)(m + L->pieces);
    char *ck = (char *)m + L->keys;
    uint8_t *cb = m + L->blobs;
    size_t off = 0;
    c->flat = 1;
    c->e = ce;
    c->cap = st->n;
    c->dev_ops = st->dev_ops;
    c->dev_ctx = st->dev_ctx;
    c->ndev = ndev ? 0 : st->ndev; /* copied: the snapshot's pieces are host memory */
    if (st->dev_ops) c->dev_stage.alloc = st->dev_ops->host_alloc, c->dev_stage.release = st->dev_ops->host_free, c->dev_stage.ctx = st->dev_ctx;
    /* One pass: each entry, its pieces (their tensor bytes placed in state order) and its key. */
    for (size_t i = 0; i < st->n && !rc; i++) {
        const st_entry *e = &st->e[i];
        st_entry *d = &ce[i];
        *d = *e;
        d->value = NULL;
        d->blob = NULL;
        c->n = i + 1;
        size_t kl = strlen(e->key) + 1;
        memcpy(ck, e->key, kl);
        d->key = ck;
        ck += kl;
        if (e->path) {
            memcpy(ck, e->path, e->path_len);
            d->path = (uint8_t *)ck;
            ck += e->path_len;
        }
        d->pieces = cp;
        d->cap = e->npieces;
        for (size_t k = 0; k < e->npieces; k++) {
            cp[k] = e->pieces[k];
            if (!copy_data || e->kind != ENT_TENSOR) continue;
            uint64_t nb = piece_bytes(e, &e->pieces[k]);
            off = align_up(off, payload_align(nb));
            if (e->pieces[k].dev) dkeys[dn] = d->key, dops[dn++] = (copy_op){m + off, e->pieces[k].data, (size_t)nb}, cp[k].dev = 0;
            else if (ops) ops[nops++] = (copy_op){m + off, e->pieces[k].data, (size_t)nb};
            else if (nb) memcpy(m + off, e->pieces[k].data, nb);
            cp[k].data = m + off;
            off += nb;
        }
        cp += e->npieces;
        if (e->kind == ENT_BLOB && e->present) {
            if (e->blob_n) memcpy(cb, e->blob, e->blob_n);
            d->blob = cb;
            cb += e->blob_n;
        }
        if (e->kind == ENT_VALUE && e->present && !(d->value = sck_value_clone(e->value)))
            rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory copying a value", e->key);
    }
    if (!rc && ops) copy_parallel(ops, nops, threads);
    keep->dev_ops = dops;
    keep->dev_keys = dkeys;
    keep->dev_nops = dn;
    if (!rc) rc = save_dev_snapshot(st, keep);
    if (rc) {
        free(ops);
        free(dops);
        free(dkeys);
        keep->dev_ops = NULL;
        keep->dev_keys = NULL;
        keep->dev_nops = 0;
        sck_state_free(c);
        return rc;
    }
    keep->copy = c;
    /* Without the list (out of memory) the next save copies everything again. */
    keep->copy_stamp = ops || !npieces ? st->stamp : 0;
    keep->copy_layout = *L;
    keep->copy_data = copy_data;
    keep->copy_ops = ops;
    keep->copy_nops = nops;
    return SCK_OK;
}

int save_prepare_items(save_job *j, const sck_state *st) {
    const save_plan *p = &j->plan;
    size_t n = p->nitems[j->rank];
    j->src = calloc(n ? n : 1, sizeof *j->src);
    j->recs = calloc(SAVE_REC * n + 1, sizeof *j->recs);
    if (!j->src || !j->recs) return sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", j->rank);
    j->dev_ops = st->dev_ops;
    j->dev_ctx = st->dev_ctx;
    /* Kept in the state, which is not otherwise changed by a save: a cache, not its contents. */
    j->dev_stage = (ws_pool *)(uintptr_t)&st->dev_stage;
    int rc = SCK_OK;
    /* Shards of a model are mostly alike: a tensor item with the dtype and sizes of the tensor item
     * before has the same data.pkl, kept once. */
    const st_entry *last = NULL;
    const sck_box *last_box = NULL;
    size_t last_off = 0, last_len = 0;
    uint32_t last_crc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const plan_item *it = &p->items[j->rank][i];
        /* The state the plan was encoded from (or its copy, entry for entry): no lookups by key. */
        const st_entry *se = it->local_entry < st->n ? &st->e[it->local_entry] : NULL;
        save_src *s = &j->src[i];
        if (!se) return sck_err(SCK_ERR_INVALID_ARG, "item %zu: missing from the local state", i);
        size_t at = j->pkls.len;
        if (se->kind == ENT_TENSOR) {
            if (it->local_piece >= se->npieces) return sck_err(SCK_ERR_INVALID_ARG, "'%s': piece %zu missing from the local state", se->key, it->local_piece);
            const st_piece *pc = &se->pieces[it->local_piece];
            s->payload = pc->data;
            s->plen = box_numel(&pc->box) * sck_dtype_size(se->dtype);
            s->dev = pc->dev;
            s->key = se->key;
            if (last && last->dtype == se->dtype && last->ndim == se->ndim &&
                !memcmp(last_box->size, pc->box.size, (size_t)se->ndim * sizeof(int64_t))) {
                s->pkl_off = last_off, s->pkl_len = last_len, s->pkl_crc = last_crc;
                continue;
            }
            rc = ti_encode_tensor_pkl(&j->pkls, se->dtype, se->ndim, pc->box.size);
            if (rc) rc = sck_err(rc, "'%s': out of memory", se->key);
            last = se, last_box = &pc->box, last_off = at, last_len = j->pkls.len - at;
        } else if (se->kind == ENT_BLOB && se->verbatim) {
            s->payload = se->blob;
            s->plen = se->blob_n;
            s->verbatim = 1;
            s->key = se->key;
            continue;
        } else if (se->kind == ENT_BLOB) {
            /* Blobs are stored as torch.save(bytes) so torch's DCP loader (torch.load per item) reads them too. */
            sck_value *b = sck_value_bytes(se->blob, se->blob_n);
            rc = b ? ti_encode_value_pkl(&j->pkls, b) : sck_err(SCK_ERR_NOMEM, "'%s': out of memory", se->key);
            sck_value_free(b);
        } else {
            rc = ti_encode_value_pkl(&j->pkls, se->value);
        }
        s->pkl_off = at;
        s->pkl_len = j->pkls.len - at;
        s->pkl_crc = rc ? 0 : sck_crc32(0, j->pkls.data + at, s->pkl_len);
        if (se->kind == ENT_TENSOR) last_crc = s->pkl_crc;
    }
    return rc;
}

/* The alignment padding before a large payload, as constant memory: its page-aligned part goes to
 * the writer by reference (ws_append_const), not through the staging buffer, whose fresh pages each
 * fault when first written.  On the benchmark's VM (shadow page tables) 32 KiB of padding copied per
 * 2 MiB tensor made the faults a quarter of an 8-rank O_DIRECT save's CPU. */
#define PAD16 ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, \
              ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, ZIP_PAD_BYTE, \
              ZIP_PAD_BYTE, ZIP_PAD_BYTE
#define PAD256 PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16, PAD16
#define PAD4K PAD256, PAD256, PAD256, PAD256, PAD256, PAD256, PAD256, PAD256, \
              PAD256, PAD256, PAD256, PAD256, PAD256, PAD256, PAD256, PAD256
static _Alignas(WS_ALIGN) const uint8_t zip_pad[BLOCK_ALIGN] = {PAD4K, PAD4K, PAD4K, PAD4K, PAD4K, PAD4K, PAD4K, PAD4K};

/* How many bytes at the end of the n bytes at p, which end at file offset `end`, are padding that
 * zip_pad can stand for: whole pages of it, from a page boundary of the file. */
static uint64_t pad_tail(const uint8_t *p, uint64_t n, uint64_t end) {
    uint64_t t = 0;
    if (end % WS_ALIGN) return 0;
    while (t + WS_ALIGN <= n && t + WS_ALIGN <= sizeof zip_pad && !memcmp(p + n - t - WS_ALIGN, zip_pad, WS_ALIGN)) t += WS_ALIGN;
    return t;
}

/* Appends one torch.save archive (data.pkl and optional payload) to the stream; rec receives its
 * offset, length, the CRC-32C of all its bytes and where in it the payload lies (0: none).  The payload goes by reference: it stays valid
 * until the stream is closed. */
static int write_archive(wstream *w, const char *path, const uint8_t *pkls, const save_src *s, uint64_t *rec) {
    zip_entry ents[3];
    size_t n;
    uint32_t crc = s->payload ? sck_crc32(0, s->payload, s->plen) : 0;
    sck_buf pkl = {(uint8_t *)(uintptr_t)(pkls + s->pkl_off), s->pkl_len, s->pkl_len}; /* a view */
    ti_entries(ents, &n, &pkl, s->pkl_crc, s->payload, s->plen, crc);
    size_t big = SIZE_MAX; /* the tensor record gets the page alignment, data.pkl and the rest torch's 64 */
    for (size_t k = 0; k < n && s->payload; k++)
        if (ents[k].data == s->payload) big = k;
    zip_plan zp;
    int rc = zip_plan_build_ex(&zp, ents, n, "archive", ws_pos(w), ITEM_ALIGN, big, payload_align(s->plen));
    if (rc) {
        zip_plan_free(&zp);
        return sck_err(rc, "%s: cannot lay out an archive", path);
    }
    rec[0] = ws_pos(w);
    rec[1] = zp.total;
    uint32_t c = 0;
    for (size_t k = 0; k < zp.nseg && !rc; k++) {
        const zip_segment *sg = &zp.seg[k];
        const void *p = sg->entry < 0 ? (const void *)(zp.hdr.data + sg->buf_off) : ents[sg->entry].data;
        /* The headers before the large payload end in its padding. */
        uint64_t tail = sg->entry < 0 && k + 1 < zp.nseg && big != SIZE_MAX && zp.seg[k + 1].entry == (int)big
                            ? pad_tail(p, sg->len, ws_pos(w) + sg->len) : 0;
        /* Queued first: the writer starts on it while we checksum it. */
        rc = ws_append(w, p, sg->len - tail, sg->entry >= 0);
        if (!rc && tail) rc = ws_append_const(w, zip_pad, tail);
        c = sck_crc32c(c, p, sg->len);
    }
    rec[2] = c;
    rec[3] = big != SIZE_MAX ? zp.payload_off[big] : 0;
    zip_plan_free(&zp);
    return rc;
}

/* A verbatim item: its bytes as they are, at a 64-byte boundary as torch's archives are. */
static int write_verbatim(wstream *w, const save_src *s, uint64_t *rec) {
    uint64_t pad = (ITEM_ALIGN - ws_pos(w) % ITEM_ALIGN) % ITEM_ALIGN;
    int rc = pad ? ws_append_const(w, zip_pad, pad) : SCK_OK;
    rec[0] = ws_pos(w);
    rec[1] = s->plen;
    if (!rc) rc = ws_append(w, s->payload, s->plen, 1);
    rec[2] = sck_crc32c(0, s->payload, (size_t)s->plen);
    rec[3] = 0;
    return rc;
}

/* write_archive for a device payload: the headers before it are written with a CRC-32 of 0, the
 * payload through staging (save_dev_payload), and the archive laid out again with its CRC-32: the
 * headers after it are written from there, and the bytes that changed before it become patches. */
static int write_archive_dev(save_job *j, wstream *w, const char *path, const uint8_t *pkls, const save_src *s, uint64_t *rec) {
    zip_entry ents[3];
    size_t n;
    sck_buf pkl = {(uint8_t *)(uintptr_t)(pkls + s->pkl_off), s->pkl_len, s->pkl_len}; /* a view */
    ti_entries(ents, &n, &pkl, s->pkl_crc, s->payload, s->plen, 0);
    size_t big = SIZE_MAX;
    for (size_t k = 0; k < n; k++)
        if (ents[k].data == s->payload) big = k;
    zip_plan zp, z2;
    memset(&z2, 0, sizeof z2);
    uint64_t at = ws_pos(w);
    int rc = zip_plan_build_ex(&zp, ents, n, "archive", at, ITEM_ALIGN, big, payload_align(s->plen));
    if (rc) {
        zip_plan_free(&zp);
        return sck_err(rc, "%s: cannot lay out an archive", path);
    }
    rec[0] = at;
    rec[1] = zp.total;
    uint32_t c = 0, crc = 0, pc = 0;
    size_t k = 0, nseg = zp.nseg;
    uint64_t *seg_at = malloc((nseg ? nseg : 1) * sizeof *seg_at);
    if (!seg_at) rc = sck_err(SCK_ERR_NOMEM, "rank %d: out of memory", j->rank);
    for (; k < nseg && !rc && zp.seg[k].entry != (int)big; k++) { /* the headers before the payload */
        const zip_segment *sg = &zp.seg[k];
        const void *p = sg->entry < 0 ? (const void *)(zp.hdr.data + sg->buf_off) : ents[sg->entry].data;
        uint64_t tail = sg->entry < 0 && k + 1 < nseg && zp.seg[k + 1].entry == (int)big ? pad_tail(p, sg->len, ws_pos(w) + sg->len) : 0;
        seg_at[k] = ws_pos(w);
        rc = ws_append(w, p, sg->len - tail, 0);
        if (!rc && tail) rc = ws_append_const(w, zip_pad, tail);
    }
    size_t pk = k;
    if (!rc && pk == nseg) rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': internal: no payload record in the archive", s->key);
    if (!rc) rc = save_dev_payload(j, w, path, s->key, s->payload, s->plen, &crc, &pc);
    if (!rc) {
        ti_entries(ents, &n, &pkl, s->pkl_crc, s->payload, s->plen, crc);
        rc = zip_plan_build_ex(&z2, ents, n, "archive", at, ITEM_ALIGN, big, payload_align(s->plen));
        if (rc) rc = sck_err(rc, "%s: cannot lay out an archive", path);
        else if (z2.nseg != nseg || z2.hdr.len != zp.hdr.len || z2.total != zp.total)
            rc = sck_err(SCK_ERR_INVALID_ARG, "'%s': internal: the archive's layout changed with its CRC", s->key);
    }
    /* The headers before the payload as they should be: checksummed, and what differs patched. */
    for (size_t q = 0; q < pk && !rc; q++) {
        const zip_segment *sg = &z2.seg[q];
        const uint8_t *p2 = sg->entry < 0 ? z2.hdr.data + sg->buf_off : ents[sg->entry].data;
        c = sck_crc32c(c, p2, sg->len);
        if (sg->entry >= 0) continue;
        const uint8_t *p1 = zp.hdr.data + zp.seg[q].buf_off;
        size_t lo = 0, hi = sg->len;
        while (lo < hi && p1[lo] == p2[lo]) lo++;
        while (hi > lo && p1[hi - 1] == p2[hi - 1]) hi--;
        if (lo < hi) rc = save_add_patch(j, seg_at[q] + lo, p2 + lo, hi - lo);
    }
    if (!rc) c = sck_crc32c_combine(c, pc, s->plen);
    for (k = pk + 1; k < nseg && !rc; k++) { /* after the payload: the central directory, with the CRC */
        const zip_segment *sg = &z2.seg[k];
        const void *p = sg->entry < 0 ? (const void *)(z2.hdr.data + sg->buf_off) : ents[sg->entry].data;
        rc = ws_append(w, p, sg->len, sg->entry >= 0);
        c = sck_crc32c(c, p, sg->len);
    }
    rec[2] = c;
    rec[3] = big != SIZE_MAX ? zp.payload_off[big] : 0;
    free(seg_at);
    zip_plan_free(&zp);
    zip_plan_free(&z2);
    return rc;
}

int save_write_file(save_job *j) {
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/__%d_0.distcp", j->cm.tmp, j->rank);
    if (k < 0 || (size_t)k >= sizeof path) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", j->cm.tmp);
    size_t ndev = 0;
    for (size_t i = 0; i < j->plan.nitems[j->rank]; i++) ndev += j->src[i].dev;
    int pin = ndev && j->dev_ops && j->dev_ops->host_alloc; /* device copies land in pinned staging */
    ws_opts o = {j->stage_bytes, 2, j->direct, j->do_fsync, pin ? j->dev_stage : j->keep ? &j->keep->stage : NULL};
    wstream *w;
    j->npatches = 0;
    int rc = ws_open(&w, path, &o);
    if (rc) return rc;
    for (size_t i = 0; i < j->plan.nitems[j->rank] && !rc; i++)
        rc = j->src[i].verbatim ? write_verbatim(w, &j->src[i], &j->recs[SAVE_REC * i])
             : j->src[i].dev    ? write_archive_dev(j, w, path, j->pkls.data, &j->src[i], &j->recs[SAVE_REC * i])
                           : write_archive(w, path, j->pkls.data, &j->src[i], &j->recs[SAVE_REC * i]);
    if (rc) {
        ws_abort(w);
        return rc;
    }
    if (j->rank == 0 && !ws_close_start(w)) {
        /* While the writer finishes the file (the last writes, the fsync): .metadata but for the
         * items' places, which come with collective 2.  Otherwise it is encoded whole at the end,
         * while every other rank waits. */
        j->meta_early = dcp_meta_encode_early(&j->plan.m, &j->meta) == SCK_OK;
        if (!j->meta_early) sck_err_clear(); /* out of memory here: the end tries again */
    }
    rc = ws_close(w);
    return rc ? rc : save_apply_patches(j, path);
}
