/* load_checks.c - one checker per item on a resharded load (see load_checks.h). */
#include "load_checks.h"

#include <stdlib.h>
#include <string.h>

/* Whether load_tensor (src/load.c) reads entry ce for e: it rejects other kinds, dtypes and shapes. */
static int readable(const ck_entry *ce, const st_entry *e) {
    return e->kind == ENT_TENSOR && !ce->is_bytes && ce->dtype >= 0 && ce->dtype == (int)e->dtype && ce->ndim == e->ndim &&
           !memcmp(ce->shape, e->shape, (size_t)e->ndim * sizeof *e->shape);
}

/* First item number of each entry (n+1 values). */
static size_t *item_bases(const ck_meta *m) {
    size_t *base = malloc((m->n + 1) * sizeof *base);
    if (!base) return NULL;
    base[0] = 0;
    for (size_t i = 0; i < m->n; i++) base[i + 1] = base[i] + m->e[i].nchunks;
    return base;
}

int lc_needs(const sck_ckpt *ck, const sck_state *st, lc_need **out, size_t *n) {
    *out = NULL;
    *n = 0;
    size_t *base = item_bases(&ck->m);
    uint64_t *need = base ? calloc(base[ck->m.n] ? base[ck->m.n] : 1, sizeof *need) : NULL;
    if (!need) {
        free(base);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    }
    for (size_t i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        long ei = e->kind == ENT_TENSOR ? ck_meta_find(&ck->m, e->key) : -1;
        if (ei < 0 || !readable(&ck->m.e[ei], e)) continue;
        const ck_entry *ce = &ck->m.e[ei];
        uint64_t elem = sck_dtype_size(e->dtype);
        for (size_t p = 0; p < e->npieces; p++) {
            const sck_box *want = &e->pieces[p].box;
            if (!box_within(want, ce->shape)) continue;
            for (size_t ci = 0; ci < ce->nchunks; ci++) {
                sck_box ov;
                if (!ce->chunks[ci].has_crc || !box_intersect(&ce->chunks[ci].box, want, &ov)) continue;
                uint64_t *b = &need[base[ei] + ci], add = box_numel(&ov) * elem;
                *b = add > UINT64_MAX - *b ? UINT64_MAX : *b + add;
            }
        }
    }
    size_t k = 0;
    for (size_t g = 0; g < base[ck->m.n]; g++) k += need[g] != 0;
    lc_need *l = k ? malloc(k * sizeof *l) : NULL;
    if (k && !l) {
        free(base);
        free(need);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    }
    k = 0;
    for (size_t g = 0; g < base[ck->m.n]; g++)
        if (need[g]) l[k++] = (lc_need){g, need[g]};
    free(base);
    free(need);
    *out = l;
    *n = k;
    return SCK_OK;
}

/* Bytes rank list l (ascending items) needs of item; 0 if none. */
static uint64_t need_of(const lc_need *l, size_t n, uint64_t item) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l[mid].item < item) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && l[lo].item == item ? l[lo].bytes : 0;
}

int lc_owner(const lc_need *const *all, const size_t *n, int nranks, uint64_t item) {
    uint64_t most = 0;
    int ties = 0;
    for (int r = 0; r < nranks; r++) {
        uint64_t b = need_of(all[r], n[r], item);
        if (b > most) most = b, ties = 1;
        else if (b == most && b) ties++;
    }
    if (!most) return -1;
    int pick = (int)(item % (uint64_t)ties); /* ties spread over the tied ranks, item by item */
    for (int r = 0; r < nranks; r++)
        if (need_of(all[r], n[r], item) == most && pick-- == 0) return r;
    return -1; /* not reached */
}

static int any_checksum(const ck_meta *m) {
    for (size_t i = 0; i < m->n; i++)
        for (size_t c = 0; c < m->e[i].nchunks; c++)
            if (!m->e[i].is_bytes && m->e[i].chunks[c].has_crc) return 1;
    return 0;
}

/* Marks in ck->peer_checks the items of `mine` (ascending) that another rank owns.  Out of memory, it
 * marks nothing: this rank then checks everything it reads, which is safe, only slower. */
static void mark_peers(sck_ckpt *ck, const lc_need *const *all, const size_t *n, int nranks, int me) {
    size_t *base = item_bases(&ck->m);
    uint8_t **pc = base ? calloc(ck->m.n ? ck->m.n : 1, sizeof *pc) : NULL;
    size_t ei = 0;
    for (size_t k = 0; pc && k < n[me]; k++) {
        const lc_need *x = &all[me][k];
        if (lc_owner(all, n, nranks, x->item) == me) continue;
        while (ei < ck->m.n && base[ei + 1] <= x->item) ei++;
        if (ei == ck->m.n) break; /* not an item of this model: cannot happen with our own lists */
        if (!pc[ei] && !(pc[ei] = calloc(ck->m.e[ei].nchunks, 1))) {
            for (size_t i = 0; i < ck->m.n; i++) free(pc[i]);
            free(pc);
            pc = NULL;
            break;
        }
        pc[ei][x->item - base[ei]] = 1;
    }
    free(base);
    ck->peer_checks = pc;
}

int lc_assign(sck_comm *comm, sck_ckpt *ck, const sck_state *st) {
    /* The model is the same on every rank, so every rank takes the same branch. */
    if (comm->size == 1 || !any_checksum(&ck->m)) return SCK_OK;
    lc_need *mine = NULL;
    size_t n = 0;
    int local = ck->verify ? lc_needs(ck, st, &mine, &n) : SCK_OK;
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    size_t *nr = calloc((size_t)comm->size, sizeof *nr);
    const lc_need **lists = calloc((size_t)comm->size, sizeof *lists);
    if (!counts || !nr || !lists) {
        free(counts);
        free(nr);
        free(lists);
        free(mine);
        return comm_agree(comm, sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir));
    }
    void *all = NULL;
    int rc = comm_agree_gather(comm, local, mine, n * sizeof *mine, &all, counts);
    free(mine);
    int whole = 1; /* each list a whole number of records (16 bytes), so each starts aligned */
    for (int r = 0; !rc && r < comm->size; r++) whole &= counts[r] % sizeof(lc_need) == 0;
    if (!rc && whole) { /* else (not from this code) nothing is marked: every rank checks what it reads */
        const uint8_t *p = all;
        for (int r = 0; r < comm->size; r++) {
            lists[r] = (const lc_need *)(const void *)p;
            nr[r] = counts[r] / sizeof(lc_need);
            p += counts[r];
        }
        mark_peers(ck, lists, nr, comm->size, comm->rank);
    }
    free(all);
    free(counts);
    free(nr);
    free(lists);
    return rc;
}
