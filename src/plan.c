/* plan.c - gathering local states into one global save plan (see plan.h). */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Wire format of a local plan (little-endian):
 *   u32 n; n x { u32 keylen, key, u8 kind, u8 present, u8 dtype, u8 ndim, u8 replicated,
 *                i64 shape[ndim], u32 npieces, npieces x { i64 off[ndim], i64 size[ndim] } } */

int plan_encode_local(const sck_state *st, sck_buf *out) {
    int rc = sck_buf_put_le32(out, (uint32_t)st->n);
    for (size_t i = 0; i < st->n && !rc; i++) {
        const st_entry *e = &st->e[i];
        size_t kl = strlen(e->key);
        rc |= sck_buf_put_le32(out, (uint32_t)kl);
        rc |= sck_buf_append(out, e->key, kl);
        rc |= sck_buf_put_u8(out, (uint8_t)e->kind);
        rc |= sck_buf_put_u8(out, (uint8_t)e->present);
        rc |= sck_buf_put_u8(out, (uint8_t)e->dtype);
        rc |= sck_buf_put_u8(out, (uint8_t)e->ndim);
        rc |= sck_buf_put_u8(out, (uint8_t)e->replicated);
        for (int d = 0; d < e->ndim; d++) rc |= sck_buf_put_le64(out, (uint64_t)e->shape[d]);
        rc |= sck_buf_put_le32(out, (uint32_t)e->npieces);
        for (size_t p = 0; p < e->npieces; p++) {
            for (int d = 0; d < e->ndim; d++) rc |= sck_buf_put_le64(out, (uint64_t)e->pieces[p].box.off[d]);
            for (int d = 0; d < e->ndim; d++) rc |= sck_buf_put_le64(out, (uint64_t)e->pieces[p].box.size[d]);
        }
    }
    return rc ? sck_err(SCK_ERR_NOMEM, "out of memory encoding the local save plan") : SCK_OK;
}

/* One rank's view of one key, pointing into the gathered bytes. */
typedef struct pent {
    const char *key;     /* NUL-terminated copy */
    int rank;
    int kind, present, dtype, ndim, replicated;
    int64_t shape[SCK_MAX_DIMS];
    uint32_t npieces;
    const uint8_t *pieces;  /* raw boxes */
    size_t local_index;     /* position of the key in that rank's state */
} pent;

typedef struct rd {
    const uint8_t *p, *end;
    int bad;
} rd;

static uint64_t rd_u64(rd *r) {
    if (r->end - r->p < 8) { r->bad = 1; return 0; }
    uint64_t v = sck_le64(r->p);
    r->p += 8;
    return v;
}
static uint32_t rd_u32(rd *r) {
    if (r->end - r->p < 4) { r->bad = 1; return 0; }
    uint32_t v = sck_le32(r->p);
    r->p += 4;
    return v;
}
static uint8_t rd_u8(rd *r) {
    if (r->end - r->p < 1) { r->bad = 1; return 0; }
    return *r->p++;
}

static int cmp_pent(const void *a, const void *b) {
    const pent *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static void piece_box(const pent *pe, uint32_t j, sck_box *b) {
    const uint8_t *q = pe->pieces + (size_t)j * 16 * (size_t)pe->ndim;
    b->ndim = pe->ndim;
    for (int d = 0; d < pe->ndim; d++) b->off[d] = (int64_t)sck_le64(q + 8 * d);
    for (int d = 0; d < pe->ndim; d++) b->size[d] = (int64_t)sck_le64(q + 8 * (pe->ndim + d));
}

void plan_free(save_plan *p) {
    ck_meta_free(&p->m);
    if (p->items)
        for (int r = 0; r < p->nranks; r++) free(p->items[r]);
    free(p->items);
    free(p->nitems);
    memset(p, 0, sizeof *p);
}

static int add_item(save_plan *p, int rank, size_t entry, size_t chunk, size_t piece, size_t *caps) {
    if (p->nitems[rank] == caps[rank]) {
        size_t cap = caps[rank] ? caps[rank] * 2 : 16;
        plan_item *it = realloc(p->items[rank], cap * sizeof *it);
        if (!it) return sck_err(SCK_ERR_NOMEM, "out of memory building the save plan");
        p->items[rank] = it;
        caps[rank] = cap;
    }
    plan_item *it = &p->items[rank][p->nitems[rank]++];
    it->entry = entry;
    it->chunk = chunk;
    it->local_piece = piece;
    return SCK_OK;
}

static const char *kind_name(int k) { return k == ENT_TENSOR ? "tensor" : k == ENT_BLOB ? "blob" : "value"; }

/* Merges the ranks' views [g0, g1) of one key into a model entry and assigns its chunks. */
static int merge_key(save_plan *p, const pent *g, size_t ng, uint64_t *load, size_t *caps) {
    const pent *f = &g[0];
    for (size_t i = 1; i < ng; i++) {
        const pent *x = &g[i];
        if (x->kind != f->kind)
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d saves a %s, rank %d a %s", f->key, f->rank, kind_name(f->kind),
                           x->rank, kind_name(x->kind));
        if (f->kind == ENT_TENSOR &&
            (x->dtype != f->dtype || x->ndim != f->ndim || memcmp(x->shape, f->shape, (size_t)f->ndim * 8)))
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d and rank %d disagree on dtype or global shape", f->key, f->rank,
                           x->rank);
        if (f->kind == ENT_TENSOR && x->replicated != f->replicated)
            return sck_err(SCK_ERR_MISMATCH, "'%s': replicated on rank %d but sharded on rank %d", f->key,
                           f->replicated ? f->rank : x->rank, f->replicated ? x->rank : f->rank);
    }
    ck_entry *e;
    int rc = ck_meta_add(&p->m, f->key, &e);
    if (rc) return rc;
    size_t ei = p->m.n - 1;
    if (f->kind != ENT_TENSOR) {
        e->is_bytes = 1;
        const pent *w = NULL;
        for (size_t i = 0; i < ng && !w; i++)
            if (g[i].present) w = &g[i]; /* lowest rank with data keeps its copy */
        if (!w) return sck_err(SCK_ERR_INVALID_ARG, "'%s': no rank supplied data for this %s", f->key, kind_name(f->kind));
        ck_chunk c;
        memset(&c, 0, sizeof c);
        c.file = (uint32_t)w->rank;
        if ((rc = ck_entry_add_chunk(e, &c))) return rc;
        load[w->rank] += 1;
        return add_item(p, w->rank, ei, 0, w->local_index, caps);
    }
    e->dtype = f->dtype;
    e->ndim = f->ndim;
    memcpy(e->shape, f->shape, sizeof e->shape);
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", sck_dtype_name((sck_dtype)f->dtype));
    uint64_t numel = 0;
    sck_numel(f->ndim, f->shape, &numel);
    uint64_t bytes = numel * sck_dtype_size((sck_dtype)f->dtype);
    if (f->replicated) {
        if (numel == 0) return SCK_OK;
        /* Written once, by the holder with the least data so far (as DCP's dedup does). */
        const pent *w = &g[0];
        for (size_t i = 1; i < ng; i++)
            if (load[g[i].rank] < load[w->rank]) w = &g[i];
        ck_chunk c;
        memset(&c, 0, sizeof c);
        c.box.ndim = f->ndim;
        memcpy(c.box.size, f->shape, sizeof c.box.size);
        c.file = (uint32_t)w->rank;
        if ((rc = ck_entry_add_chunk(e, &c))) return rc;
        load[w->rank] += bytes;
        return add_item(p, w->rank, ei, 0, 0, caps);
    }
    size_t total = 0;
    for (size_t i = 0; i < ng; i++) total += g[i].npieces;
    sck_box *boxes = malloc((total ? total : 1) * sizeof *boxes);
    int *owner = malloc((total ? total : 1) * sizeof *owner);
    if (!boxes || !owner) {
        free(boxes);
        free(owner);
        return sck_err(SCK_ERR_NOMEM, "'%s': out of memory checking coverage", f->key);
    }
    size_t k = 0;
    for (size_t i = 0; i < ng; i++) {
        for (uint32_t j = 0; j < g[i].npieces; j++, k++) {
            piece_box(&g[i], j, &boxes[k]);
            owner[k] = g[i].rank;
        }
    }
    long ba = -1, bb = -1;
    if (!box_cover_exact(f->ndim, f->shape, boxes, total, &ba, &bb)) {
        if (ba >= 0 && bb >= 0)
            rc = sck_err(SCK_ERR_COVERAGE, "'%s': shards overlap (a box of rank %d and a box of rank %d)", f->key, owner[ba], owner[bb]);
        else if (ba >= 0)
            rc = sck_err(SCK_ERR_COVERAGE, "'%s': a box of rank %d lies outside the tensor", f->key, owner[ba]);
        else
            rc = sck_err(SCK_ERR_COVERAGE, "'%s': the shards of all ranks do not cover the whole tensor", f->key);
    }
    k = 0;
    for (size_t i = 0; i < ng && !rc; i++) {
        for (uint32_t j = 0; j < g[i].npieces && !rc; j++, k++) {
            ck_chunk c;
            memset(&c, 0, sizeof c);
            c.box = boxes[k];
            c.file = (uint32_t)g[i].rank;
            rc = ck_entry_add_chunk(e, &c);
            if (!rc) rc = add_item(p, g[i].rank, ei, e->nchunks - 1, j, caps);
            load[g[i].rank] += box_numel(&boxes[k]) * sck_dtype_size((sck_dtype)f->dtype);
        }
    }
    free(boxes);
    free(owner);
    return rc;
}

int plan_build(const uint8_t *all, const size_t *counts, int nranks, save_plan *out) {
    memset(out, 0, sizeof *out);
    out->nranks = nranks;
    out->items = calloc((size_t)nranks, sizeof *out->items);
    out->nitems = calloc((size_t)nranks, sizeof *out->nitems);
    size_t *caps = calloc((size_t)nranks, sizeof *caps);
    uint64_t *load = calloc((size_t)nranks, sizeof *load);
    pent *pe = NULL;
    size_t npe = 0, cappe = 0;
    int rc = SCK_OK;
    if (!out->items || !out->nitems || !caps || !load) {
        rc = sck_err(SCK_ERR_NOMEM, "out of memory building the save plan");
        goto done;
    }
    const uint8_t *p = all;
    for (int r = 0; r < nranks && !rc; r++) {
        rd R = {p, p + counts[r], 0};
        uint32_t n = rd_u32(&R);
        for (uint32_t i = 0; i < n && !R.bad; i++) {
            if (npe == cappe) {
                size_t cap = cappe ? cappe * 2 : 64;
                pent *np = realloc(pe, cap * sizeof *np);
                if (!np) {
                    rc = sck_err(SCK_ERR_NOMEM, "out of memory building the save plan");
                    break;
                }
                pe = np;
                cappe = cap;
            }
            pent *x = &pe[npe];
            memset(x, 0, sizeof *x);
            uint32_t kl = rd_u32(&R);
            if (R.bad || (size_t)(R.end - R.p) < kl) {
                R.bad = 1;
                break;
            }
            x->key = sck_strndup((const char *)R.p, kl);
            if (!x->key) {
                rc = sck_err(SCK_ERR_NOMEM, "out of memory building the save plan");
                break;
            }
            npe++;
            R.p += kl;
            x->rank = r;
            x->local_index = i;
            x->kind = rd_u8(&R);
            x->present = rd_u8(&R);
            x->dtype = rd_u8(&R);
            x->ndim = rd_u8(&R);
            x->replicated = rd_u8(&R);
            if (x->ndim > SCK_MAX_DIMS) {
                R.bad = 1;
                break;
            }
            for (int d = 0; d < x->ndim; d++) x->shape[d] = (int64_t)rd_u64(&R);
            x->npieces = rd_u32(&R);
            size_t pb = (size_t)x->npieces * 16 * (size_t)x->ndim;
            if (R.bad || (size_t)(R.end - R.p) < pb) {
                R.bad = 1;
                break;
            }
            x->pieces = R.p;
            R.p += pb;
        }
        if (!rc && R.bad) rc = sck_err(SCK_ERR_FORMAT, "save plan from rank %d is corrupt", r);
        p += counts[r];
    }
    if (rc) goto done;
    if (npe > 1) qsort(pe, npe, sizeof *pe, cmp_pent);
    for (int r = 0; r < nranks && !rc; r++) {
        char name[64];
        uint32_t idx;
        snprintf(name, sizeof name, "__%d_0.distcp", r);
        rc = ck_meta_file(&out->m, name, &idx);
    }
    for (size_t i = 0; i < npe && !rc;) {
        size_t j = i + 1;
        while (j < npe && !strcmp(pe[j].key, pe[i].key)) j++;
        rc = merge_key(out, &pe[i], j - i, load, caps);
        i = j;
    }
done:
    for (size_t i = 0; i < npe; i++) free((char *)pe[i].key);
    free(pe);
    free(caps);
    free(load);
    if (rc) plan_free(out);
    return rc;
}
