/* load_checks.c - one checker per item on a resharded load (see load_checks.h). */
#include "load_checks.h"

#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

/* First item number of each entry (n+1 values). */
static size_t *item_bases(const ck_meta *m) {
    size_t *base = malloc((m->n + 1) * sizeof *base);
    if (!base) return NULL;
    base[0] = 0;
    for (size_t i = 0; i < m->n; i++) base[i + 1] = base[i] + m->e[i].nchunks;
    return base;
}

/* One run of this rank in an item: gathered, then sorted by item and order of reading. */
typedef struct lc_run {
    uint64_t item, seq, off, len;
} lc_run;

static int cmp_run(const void *a, const void *b) {
    const lc_run *x = a, *y = b;
    if (x->item != y->item) return x->item < y->item ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the runs of one overlap (or marks the item "many" when they are many, or cannot be had:
 * the read itself will report what is wrong). */
static int add_runs(sck_ckpt *ck, size_t ei, size_t ci, uint64_t g, const sck_box *want, const sck_box *ov, uint8_t *nr,
                    lc_run **runs, size_t *nruns, size_t *cap) {
    uint64_t rg[LC_RANGES][2];
    size_t n = 0;
    if (nr[g] > LC_RANGES) return SCK_OK;
    if (ckpt_overlap_runs(ck, ei, ci, want, ov, rg, LC_RANGES, &n) != SCK_OK || n > LC_RANGES || nr[g] + n > LC_RANGES) {
        sck_err_clear();
        nr[g] = LC_RANGES + 1;
        return SCK_OK;
    }
    if (*nruns + n > *cap) {
        size_t c2 = *cap ? 2 * *cap : 64;
        while (c2 < *nruns + n) c2 *= 2;
        lc_run *p = realloc(*runs, c2 * sizeof *p);
        if (!p) return SCK_ERR_NOMEM;
        *runs = p;
        *cap = c2;
    }
    for (size_t k = 0; k < n; k++) (*runs)[*nruns] = (lc_run){g, *nruns, rg[k][0], rg[k][1]}, ++*nruns;
    nr[g] = (uint8_t)(nr[g] + n);
    return SCK_OK;
}

int lc_needs(sck_ckpt *ck, const ck_want *w, const ck_reads *r, uint8_t **wire, size_t *wire_len) {
    *wire = NULL;
    *wire_len = 0;
    size_t *base = item_bases(&ck->m);
    size_t items = base ? base[ck->m.n] : 0;
    /* Written before they are read: a first read of fresh zeroed memory maps the zero page, and the
     * write after it then costs a copy-on-write fault and a TLB flush on every CPU. */
    uint64_t *need = base ? malloc((items ? items : 1) * sizeof *need) : NULL;
    uint8_t *nr = need ? malloc(items ? items : 1) : NULL; /* runs per item; LC_RANGES + 1: many */
    if (nr) {
        memset(need, 0, (items ? items : 1) * sizeof *need);
        memset(nr, 0, items ? items : 1);
    }
    lc_run *runs = NULL;
    size_t nruns = 0, cap = 0;
    int rc = nr ? SCK_OK : SCK_ERR_NOMEM;
    /* Pass 0 counts bytes and asks the kernel for every needed item's headers at once; pass 1 then
     * resolves the items (reading those headers) to find the runs, without a wait per item. */
    int partial = 0; /* overlaps reading part of a chunk: only they need pass 1 */
    for (int pass = 0; pass < 1 + !!partial; pass++) {
        for (size_t j = 0; !rc && j < r->m; j++) {
            const read_op *o = &r->op[j];
            const ck_want *x = &w[o->k];
            const ck_entry *ce = &ck->m.e[x->ei];
            const ck_chunk *c = &ce->chunks[o->ci];
            if (!c->has_crc) continue;
            uint64_t g = base[x->ei] + o->ci, *b = &need[g], add = o->elems * sck_dtype_size((sck_dtype)ce->dtype);
            /* A rank reading the whole chunk reads the whole item: it is the owner, checks it whole
             * and combines nothing (plan_comb), so its runs are not needed and the item is not
             * resolved here (for a same-layout load, no item is). */
            int whole = o->elems == box_numel(&c->box);
            if (pass) {
                sck_box ov;
                if (whole) nr[g] = LC_RANGES + 1;
                else if (box_intersect(&c->box, x->box, &ov)) rc = add_runs(ck, x->ei, o->ci, g, x->box, &ov, nr, &runs, &nruns, &cap);
                continue;
            }
            partial |= !whole;
            if (!*b && !whole) ckpt_prefetch_headers(ck, x->ei, o->ci);
            *b = add > UINT64_MAX - *b ? UINT64_MAX : *b + add;
        }
    }
    size_t k = 0;
    for (size_t g = 0; !rc && g < items; g++) k += need[g] != 0;
    /* The wire list: per item needed, varints {items skipped since the last one, bytes, number of runs
     * (0: many)} and that many {offset, length}.  Every rank gathers every rank's list, so it is kept
     * small: about 4 bytes an item where 24 would do. */
    uint8_t *out = NULL, *q = NULL;
    if (!rc) {
        if (nruns) qsort(runs, nruns, sizeof *runs, cmp_run);
        q = out = malloc(30 * k + 20 * nruns + 1);
        if (!out) rc = SCK_ERR_NOMEM;
    }
    size_t ri = 0;
    uint64_t next = 0;
    for (size_t g = 0; !rc && g < items; g++) {
        if (!need[g]) continue;
        while (ri < nruns && runs[ri].item < g) ri++;
        uint64_t m = nr[g] <= LC_RANGES ? nr[g] : 0, j = 0;
        for (size_t x = ri; j < m && x < nruns && runs[x].item == g; x++) j++;
        m = j; /* as many as there are */
        q = sck_put_varint(q, g - next);
        q = sck_put_varint(q, need[g]);
        q = sck_put_varint(q, m);
        for (j = 0; j < m; j++, ri++) q = sck_put_varint(sck_put_varint(q, runs[ri].off), runs[ri].len);
        next = g + 1;
    }
    free(base);
    free(need);
    free(nr);
    free(runs);
    if (rc) {
        free(out);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    }
    *wire = out;
    *wire_len = (size_t)(q - out);
    return SCK_OK;
}

/* Index of item in rank list l (ascending items), or -1. */
static long index_of(const lc_need *l, size_t n, uint64_t item) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l[mid].item < item) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && l[lo].item == item ? (long)lo : -1;
}

/* Bytes rank r needs of the item at index at[r] of its list (-1: none). */
static uint64_t need_at(const lc_need *const *all, const long *at, int r) { return at[r] < 0 ? 0 : all[r][at[r]].bytes; }

/* lc_owner, with each rank's index of the item in its list already found (at[r], -1: not there). */
static int owner_at(const lc_need *const *all, const long *at, int nranks, uint64_t item, uint64_t nitems) {
    uint64_t most = 0;
    for (int r = 0; r < nranks; r++) {
        uint64_t b = need_at(all, at, r);
        if (b > most) most = b;
    }
    if (!most) return -1;
    /* Near ties count as ties: 838 rows against 839 of a 1 -> 2 reshard would otherwise give every item
     * to one rank, whose reads would then pace the whole load. */
    uint64_t bar = most - most / LC_NEAR_TIE;
    int ties = 0;
    for (int r = 0; r < nranks; r++) ties += need_at(all, at, r) >= bar;
    /* Ties: the items split into contiguous ranges, one per tied rank in rank order.  Small items are
     * read many at a time (one batch, src/ckpt.c), so an owner of every other item would read them all. */
    int pick = item < nitems ? (int)((long double)item * ties / nitems) : 0;
    for (int r = 0; r < nranks; r++)
        if (need_at(all, at, r) >= bar && pick-- == 0) return r;
    return -1; /* not reached */
}

int lc_owner(const lc_need *const *all, const size_t *n, int nranks, uint64_t item, uint64_t nitems) {
    long *at = malloc((size_t)(nranks > 0 ? nranks : 1) * sizeof *at);
    if (!at) return -1;
    for (int r = 0; r < nranks; r++) at[r] = index_of(all[r], n[r], item);
    int o = owner_at(all, at, nranks, item, nitems);
    free(at);
    return o;
}

static int any_checksum(const ck_meta *m) {
    for (size_t i = 0; i < m->n; i++)
        for (size_t c = 0; c < m->e[i].nchunks; c++)
            if (!m->e[i].is_bytes && m->e[i].chunks[c].has_crc) return 1;
    return 0;
}

/* Where one rank's runs of one item are in the gathered wire lists: nr {offset, length} varint pairs
 * from rg on (parse_list checked that they lie before the list's end); nr 0: many runs, or none known. */
typedef struct lc_rng {
    const uint8_t *rg, *end;
    uint64_t nr;
} lc_rng;

typedef struct lc_cand {
    uint64_t off, len;
    int rank;
} lc_cand;

static int cmp_cand(const void *a, const void *b) {
    const lc_cand *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* The combined check of chunk c's item (at[r]: its index in rank r's list, -1 if absent), as every
 * rank plans it from the same lists: if every reader reads it as a few runs inside it, the segments
 * are chosen greedily by offset (a run not overlapping those before it), and this rank's share (its
 * segments; for the owner, the gaps) goes into *cb.  Items only one rank reads are not combined.  Returns 0 if the item is not combined, 1 if it
 * is, -1 out of memory. */
static int plan_comb(const ck_chunk *c, const lc_rng *const *rng, const long *at, int nranks, int me, int owner, ck_comb *cb) {
    size_t nc = 0;
    int readers = 0;
    uint64_t lo = c->offset, hi = c->offset + c->length;
    for (int r = 0; r < nranks; r++) {
        long i = at[r];
        if (i < 0) continue;
        if (rng[r][i].nr == 0) return 0;
        nc += (size_t)rng[r][i].nr;
        readers++;
    }
    if (readers < 2) return 0; /* its only reader checks it whole, in the same pass (src/ckpt.c) */
    /* A small item's owner reads it whole, in a batch with the items around it, and checks it;
     * the other readers read only their runs.  Combining would have the owner read the headers of each
     * item on its own. */
    if (c->length <= SMALL_ITEM) return 0;
    lc_cand *cd = malloc((nc ? nc : 1) * sizeof *cd);
    if (!cd) return -1;
    nc = 0;
    for (int r = 0; r < nranks; r++) {
        long i = at[r];
        const uint8_t *q = i >= 0 ? rng[r][i].rg : NULL;
        for (uint64_t j = 0; i >= 0 && j < rng[r][i].nr; j++) {
            uint64_t off = 0, len = 0;
            if (!sck_get_varint(&q, rng[r][i].end, &off) || !sck_get_varint(&q, rng[r][i].end, &len) || !len || off < lo ||
                off > hi || len > hi - off) {
                free(cd);
                return 0; /* not from this code: no combined check */
            }
            cd[nc++] = (lc_cand){off, len, r};
        }
    }
    qsort(cd, nc, sizeof *cd, cmp_cand);
    size_t nseg = 0, ngap = 0, k = 0;
    uint64_t cur = lo;
    for (size_t j = 0; j < nc; j++) { /* keep the chosen ones at the front */
        if (cd[j].off < cur) continue;
        ngap += cd[j].off > cur;
        nseg += cd[j].rank == me;
        cur = cd[j].off + cd[j].len;
        cd[k++] = cd[j];
    }
    ngap += cur < hi;
    if (owner != me) ngap = 0;
    memset(cb, 0, sizeof *cb);
    cb->r = calloc(nseg + ngap + 1, sizeof *cb->r);
    if (!cb->r) {
        free(cd);
        return -1;
    }
    cur = lo;
    for (size_t j = 0; j < k; j++) {
        if (owner == me && cd[j].off > cur) cb->r[nseg + cb->ngap][0] = cur, cb->r[nseg + cb->ngap++][1] = cd[j].off - cur;
        if (cd[j].rank == me) cb->r[cb->nseg][0] = cd[j].off, cb->r[cb->nseg++][1] = cd[j].len;
        cur = cd[j].off + cd[j].len;
    }
    if (owner == me && cur < hi) cb->r[nseg + cb->ngap][0] = cur, cb->r[nseg + cb->ngap++][1] = hi - cur;
    free(cd);
    return 1;
}

/* Ranks sharing one page cache: the owner of a small item (read and checked whole by its owner) is the rank whose part of the files (the n
 * equal parts ckpt_file_pos measures, in rank order, where each rank's reads also start) holds the
 * item's offset, if that rank reads some of the item.  Each rank then reads whole items from one
 * stretch of the files, like one stream of a plain parallel read, and the other ranks' runs in them
 * come from the cache.  -1: no such rank (owner_at decides). */
static int part_owner(const uint64_t *ext, size_t nfiles, const ck_chunk *c, const lc_need *const *all, const long *at, int nranks) {
    if (!nfiles || c->file >= nfiles || c->length > SMALL_ITEM) return -1; /* large items combine CRCs instead */
    int r = (int)(ckpt_file_pos(ext, c->file, c->offset) * nranks / (double)nfiles);
    if (r >= nranks) r = nranks - 1;
    return need_at(all, at, r) ? r : -1;
}

/* Marks in ck->peer_checks the items of `mine` (ascending) that another rank owns (1) or that are
 * checked by combining CRCs (2, with this rank's share in ck->combs).  Out of memory, it marks
 * nothing and sets ck->plan_failed: this load then fails with SCK_ERR_NOMEM (src/load.c), as the
 * other ranks count on this one's share. */
static void mark_peers(sck_ckpt *ck, const lc_need *const *all, const lc_rng *const *rng, const size_t *n, int nranks, int me) {
    size_t *base = item_bases(&ck->m);
    const uint64_t *ext = ck->one_cache ? ck->m.file_end : NULL;
    uint8_t **pc = base ? calloc(ck->m.n ? ck->m.n : 1, sizeof *pc) : NULL;
    ck_comb *cbs = pc ? calloc(n[me] ? n[me] : 1, sizeof *cbs) : NULL;
    size_t ncb = 0, ei = 0;
    /* My items ascend, as every list does: each rank's place in its list only moves forward. */
    size_t *cur = cbs ? calloc((size_t)nranks, sizeof *cur) : NULL;
    long *at = cur ? malloc((size_t)nranks * sizeof *at) : NULL;
    int ok = at != NULL;
    for (size_t k = 0; ok && k < n[me]; k++) {
        const lc_need *x = &all[me][k];
        for (int r = 0; r < nranks; r++) {
            while (cur[r] < n[r] && all[r][cur[r]].item < x->item) cur[r]++;
            at[r] = cur[r] < n[r] && all[r][cur[r]].item == x->item ? (long)cur[r] : -1;
        }
        while (ei < ck->m.n && base[ei + 1] <= x->item) ei++;
        if (ei == ck->m.n) break; /* not an item of this model: cannot happen with our own lists */
        size_t ci = x->item - base[ei];
        int owner = ext ? part_owner(ext, ck->m.nfiles, &ck->m.e[ei].chunks[ci], all, at, nranks) : -1;
        if (owner < 0) owner = owner_at(all, at, nranks, x->item, base[ck->m.n]);
        int comb = plan_comb(&ck->m.e[ei].chunks[ci], rng, at, nranks, me, owner, &cbs[ncb]);
        if (comb < 0) ok = 0;
        if (comb <= 0 && owner == me) continue;
        if (ok && !pc[ei] && !(pc[ei] = calloc(ck->m.e[ei].nchunks, 1))) ok = 0;
        if (!ok) {
            if (comb > 0) free(cbs[ncb].r);
            break;
        }
        pc[ei][ci] = (uint8_t)(comb > 0 ? 2 : 1);
        if (comb > 0) cbs[ncb].ei = ei, cbs[ncb].ci = ci, cbs[ncb++].item = x->item;
    }
    free(base);
    free(cur);
    free(at);
    if (!ok) {
        for (size_t i = 0; pc && i < ck->m.n; i++) free(pc[i]);
        for (size_t i = 0; i < ncb; i++) free(cbs[i].r);
        free(pc);
        free(cbs);
        ck->plan_failed = 1;
        return;
    }
    ck->peer_checks = pc;
    ck->combs = cbs; /* by item, hence by (ei, ci) */
    ck->ncombs = ncb;
}

/* One record of a wire list at *q (advanced past it): 0 if malformed or past the items' range. */
static int next_record(const uint8_t **q, const uint8_t *end, uint64_t *next, lc_need *x, lc_rng *g) {
    uint64_t skip, m, v;
    if (!sck_get_varint(q, end, &skip) || !sck_get_varint(q, end, &x->bytes) || !sck_get_varint(q, end, &m) || m > LC_RANGES ||
        skip > UINT64_MAX - 1 - *next)
        return 0;
    x->item = *next + skip;
    *next = x->item + 1;
    *g = (lc_rng){*q, end, m};
    for (uint64_t j = 0; j < 2 * m; j++)
        if (!sck_get_varint(q, end, &v)) return 0;
    return 1;
}

/* Splits rank r's wire list (counts[r] bytes at p) into lc_need and lc_rng arrays (items ascend by
 * construction); 0 if malformed, -1 out of memory. */
static int parse_list(const uint8_t *p, size_t len, lc_need **l, lc_rng **g, size_t *n) {
    size_t k = 0;
    uint64_t next = 0;
    lc_need x;
    lc_rng y;
    *l = NULL;
    *g = NULL;
    *n = 0;
    for (const uint8_t *q = p; q < p + len; k++) /* count and validate */
        if (!next_record(&q, p + len, &next, &x, &y)) return 0;
    *l = malloc((k ? k : 1) * sizeof **l);
    *g = malloc((k ? k : 1) * sizeof **g);
    if (!*l || !*g) return -1;
    next = 0;
    k = 0;
    for (const uint8_t *q = p; q < p + len; k++) next_record(&q, p + len, &next, &(*l)[k], &(*g)[k]);
    *n = k;
    return 1;
}

int lc_assign(sck_comm *comm, sck_ckpt *ck, const ck_want *w, const ck_reads *r, int local) {
    /* The model is the same on every rank, so every rank takes the same branch. */
    if (comm->size == 1 || !any_checksum(&ck->m)) return SCK_OK;
    size_t wlen = 0;
    uint8_t *wire = NULL;
    if (!local && ck->verify) local = lc_needs(ck, w, r, &wire, &wlen);
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    size_t *nr = calloc((size_t)comm->size, sizeof *nr);
    lc_need **lists = calloc((size_t)comm->size, sizeof *lists);
    lc_rng **rngs = calloc((size_t)comm->size, sizeof *rngs);
    if (!counts || !nr || !lists || !rngs) {
        free(counts);
        free(nr);
        free(lists);
        free(rngs);
        free(wire);
        return comm_agree(comm, sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir));
    }
    void *all = NULL;
    int rc = comm_agree_gather(comm, local, wire, wlen, &all, counts);
    free(wire);
    int good = 1; /* else (not from this code) nothing is marked: every rank checks what it reads */
    const uint8_t *p = all;
    for (int i = 0; !rc && good && i < comm->size; i++) {
        int k = parse_list(p, counts[i], &lists[i], &rngs[i], &nr[i]);
        if (k < 0) ck->plan_failed = 1;
        good = k > 0;
        p += counts[i];
    }
    if (!rc && good) mark_peers(ck, (const lc_need *const *)lists, (const lc_rng *const *)rngs, nr, comm->size, comm->rank);
    for (int i = 0; i < comm->size; i++) free(lists[i]), free(rngs[i]);
    free(all);
    free(counts);
    free(nr);
    free(lists);
    free(rngs);
    return rc;
}

static int cmp_seg(const void *a, const void *b) {
    const ck_seg *x = a, *y = b;
    if (x->item != y->item) return x->item < y->item ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The segment CRCs of this rank's share of the items, sorted by item and offset, combined item by
 * item and compared with the metadata: the first failing item gives this rank's error. */
static int check_segs(sck_ckpt *ck, ck_seg *s, size_t n) {
    size_t *base = item_bases(&ck->m);
    if (!base) return sck_err(SCK_ERR_NOMEM, "%s: out of memory combining checksums", ck->dir);
    qsort(s, n, sizeof *s, cmp_seg);
    int rc = SCK_OK;
    size_t ei = 0;
    for (size_t i = 0; !rc && i < n;) {
        uint64_t g = s[i].item;
        while (ei < ck->m.n && base[ei + 1] <= g) ei++;
        if (ei == ck->m.n) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: a checksum record names item %llu of %zu", ck->dir, (unsigned long long)g, base[ck->m.n]);
            break;
        }
        size_t ci = g - base[ei];
        const ck_chunk *c = &ck->m.e[ei].chunks[ci];
        uint64_t cur = c->offset, end = c->offset + c->length;
        uint32_t crc = 0;
        for (; i < n && s[i].item == g; i++) {
            if (s[i].off != cur || s[i].len > end - cur) break;
            crc = sck_crc32c_combine(crc, s[i].crc, s[i].len);
            cur += s[i].len;
        }
        if (cur != end) {
            rc = sck_err(SCK_ERR_CHECKSUM, "%s/%s: '%s' item at offset %llu: the ranks' checksums cover [%llu, %llu) of [%llu, %llu)",
                         ck->dir, ck->m.files[c->file], ck->m.e[ei].key, (unsigned long long)c->offset, (unsigned long long)c->offset,
                         (unsigned long long)cur, (unsigned long long)c->offset, (unsigned long long)end);
        } else if (crc != c->crc32c) {
            rc = ckpt_crc_mismatch(ck, ei, ci, crc);
        }
    }
    free(base);
    return rc;
}

int lc_finish(sck_comm *comm, sck_ckpt *ck, int local) {
    if (comm->size == 1 || !any_checksum(&ck->m)) return comm_agree(comm, local);
    if (!local && ck->plan_failed) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory planning checksum checks", ck->dir);
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    if (!counts) return comm_agree(comm, sck_err(SCK_ERR_NOMEM, "%s: out of memory combining checksums", ck->dir));
    void *all = NULL;
    int rc = comm_agree_gather(comm, local, ck->segs, ck->nsegs * sizeof *ck->segs, &all, counts);
    size_t total = 0;
    for (int r = 0; !rc && r < comm->size; r++) total += counts[r];
    free(counts);
    if (rc) return rc; /* every rank returns the same */
    ck_seg *s = total ? malloc(total) : NULL;
    int v = SCK_OK;
    if (total % sizeof *s) v = sck_err(SCK_ERR_FORMAT, "%s: checksum records of %zu bytes", ck->dir, total);
    else if (total && !s) v = sck_err(SCK_ERR_NOMEM, "%s: out of memory combining checksums", ck->dir);
    else if (total) { /* the ranks share the work: items by number, round robin */
        size_t k = 0;
        for (size_t i = 0; i < total / sizeof *s; i++) {
            memcpy(&s[k], (const uint8_t *)all + i * sizeof *s, sizeof *s);
            k += s[k].item % (uint64_t)comm->size == (uint64_t)comm->rank;
        }
        v = check_segs(ck, s, k);
    }
    free(s);
    free(all);
    return comm_agree(comm, v);
}
