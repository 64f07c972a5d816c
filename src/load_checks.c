/* load_checks.c - one checker per item on a resharded load (see load_checks.h). */
#include "load_checks.h"

#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "load_handoff.h"

/* One checksummed overlap this rank reads: op j of the planned reads, in item g. */
typedef struct lc_rec {
    uint64_t g, bytes;
    size_t j;
    int whole;               /* the overlap is the whole chunk */
} lc_rec;

static int cmp_rec(const void *a, const void *b) {
    const lc_rec *x = a, *y = b;
    if (x->g != y->g) return x->g < y->g ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* Adds the runs of one overlap to an item's rg[0..*n) (or makes *n "many", LC_RANGES + 1, when they are
 * many or cannot be had: the read itself will report what is wrong). */
static void add_runs(sck_ckpt *ck, size_t ei, size_t ci, const sck_box *want, const sck_box *ov, uint64_t (*rg)[2], size_t *n) {
    uint64_t more[LC_RANGES][2];
    size_t k = 0;
    if (*n > LC_RANGES) return;
    if (ckpt_overlap_runs(ck, ei, ci, want, ov, more, LC_RANGES, &k) != SCK_OK || k > LC_RANGES || *n + k > LC_RANGES) {
        sck_err_clear();
        *n = LC_RANGES + 1;
        return;
    }
    memcpy(rg + *n, more, k * sizeof *more);
    *n += k;
}

int lc_needs(sck_ckpt *ck, const ck_want *w, const ck_reads *r, uint8_t **wire, size_t *wire_len) {
    *wire = NULL;
    *wire_len = 0;
    const size_t *base = ck->m.item_base;
    /* One record per checksummed overlap, by item (the reads are in file order, which for this
     * rank's own items is usually item order already): no table as large as the whole model. */
    lc_rec *rec = sck_big_alloc((r->m ? r->m : 1) * sizeof *rec);
    if (!rec) return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    size_t n = 0;
    int sorted = 1;
    for (size_t j = 0; j < r->m; j++) {
        const read_op *o = &r->op[j];
        const ck_want *x = &w[o->k];
        const ck_entry *ce = &ck->m.e[x->ei];
        const ck_chunk *c = &ce->chunks[o->ci];
        if (!c->has_crc) continue;
        rec[n] = (lc_rec){base[x->ei] + o->ci, o->elems * sck_dtype_size((sck_dtype)ce->dtype), j, o->chunk};
        if (n && cmp_rec(&rec[n - 1], &rec[n]) > 0) sorted = 0;
        n++;
    }
    if (!sorted) sck_sort(rec, n, sizeof *rec, cmp_rec);
    /* A rank reading the whole chunk reads the whole item: it is the owner, checks it whole and
     * combines nothing (plan_comb), so its runs are not needed and the item is not resolved here (for
     * a same-layout load, no item is).  The others' headers are asked for all at once first, so that
     * resolving them below does not wait for the disk item by item. */
    for (size_t i = 0, e; i < n; i = e) {
        int whole = 0;
        for (e = i; e < n && rec[e].g == rec[i].g; e++) whole |= rec[e].whole;
        const read_op *o = &r->op[rec[i].j];
        if (!whole && !o->runs) ckpt_prefetch_headers(ck, w[o->k].ei, o->ci); /* an item of ours needs none */
    }
    /* The wire list: per item needed, varints {items skipped since the last one, bytes, number of runs
     * (0: many, or the whole chunk)} and that many {offset, length}.  Every rank gathers every rank's
     * list, so it is kept small: about 4 bytes an item where 24 would do. */
    /* In memory cheap to fault in (util.h), grown in the rare case the guess is short. */
    size_t cap = n * 8 + 64, len = 0;
    uint8_t *out = sck_big_alloc(cap);
    int rc = out ? SCK_OK : SCK_ERR_NOMEM;
    uint64_t next = 0;
    for (size_t i = 0, e; i < n && !rc; i = e) {
        uint64_t bytes = 0, rg[LC_RANGES][2];
        size_t nr = 0;
        for (e = i; e < n && rec[e].g == rec[i].g; e++) {
            if (e + CK_AHEAD < n) ckpt_prefetch_box(w[r->op[rec[e + CK_AHEAD].j].k].box);
            bytes = rec[e].bytes > UINT64_MAX - bytes ? UINT64_MAX : bytes + rec[e].bytes;
            const read_op *o = &r->op[rec[e].j];
            const ck_want *x = &w[o->k];
            sck_box ov, cbox;
            if (rec[e].whole) nr = LC_RANGES + 1;
            else if (o->runs == 1 && nr < LC_RANGES) rg[nr][0] = o->run, rg[nr++][1] = o->len; /* worked out when planned */
            else if (o->runs == 1) nr = LC_RANGES + 1;
            else if (ck_chunk_intersect(&ck->m.e[x->ei], o->ci, x->box, &cbox, &ov)) add_runs(ck, x->ei, o->ci, x->box, &ov, rg, &nr);
        }
        uint8_t rec_buf[30 + 20 * LC_RANGES], *q = rec_buf;
        uint64_t m = nr <= LC_RANGES ? nr : 0;
        q = sck_put_varint(q, rec[i].g - next);
        q = sck_put_varint(q, bytes);
        q = sck_put_varint(q, m);
        for (uint64_t k = 0; k < m; k++) q = sck_put_varint(sck_put_varint(q, rg[k][0]), rg[k][1]);
        next = rec[i].g + 1;
        size_t k = (size_t)(q - rec_buf);
        if (len + k > cap) {
            uint8_t *g = sck_big_realloc(out, 2 * cap + k);
            if (!g) rc = SCK_ERR_NOMEM;
            else out = g, cap = 2 * cap + k;
        }
        if (!rc) memcpy(out + len, rec_buf, k), len += k;
    }
    sck_big_free(rec);
    if (rc) {
        sck_big_free(out);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    }
    *wire = out;
    *wire_len = len;
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

/* The bytes a rank must need of the item to tie with the rank needing most (0: no rank needs it).  Near
 * ties count as ties: 838 rows against 839 of a 1 -> 2 reshard would otherwise give every item to one
 * rank, whose reads would then pace the whole load. */
static uint64_t tie_bar(const lc_need *const *all, const long *at, int nranks) {
    uint64_t most = 0;
    for (int r = 0; r < nranks; r++) {
        uint64_t b = need_at(all, at, r);
        if (b > most) most = b;
    }
    return most - most / LC_NEAR_TIE;
}

/* lc_owner, with each rank's index of the item in its list already found (at[r], -1: not there). */
static int owner_at(const lc_need *const *all, const long *at, int nranks, uint64_t item, uint64_t nitems) {
    uint64_t bar = tie_bar(all, at, nranks);
    if (!bar) return -1;
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
 * from rg on (next_record checked that they lie before the list's end); nr 0: many runs, or none known. */
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
    sck_sort(cd, nc, sizeof *cd, cmp_cand);
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

/* The rank whose part of the files (the n equal parts ckpt_file_pos measures, in rank order, where
 * each rank's reads also start) holds chunk c's item; -1 for a file the model does not list. */
static int file_part(const uint64_t *ext, size_t nfiles, const ck_chunk *c, int nranks) {
    if (!nfiles || c->file >= nfiles) return -1;
    int r = (int)(ckpt_file_pos(ext, c->file, c->offset) * nranks / (double)nfiles);
    return r < nranks ? r : nranks - 1;
}

/* Ranks sharing one page cache: the owner of a small item (read and checked whole by its owner) is the
 * rank whose part of the files (file_part) holds the item, if that rank reads some of the item.  Each
 * rank then reads whole items from one stretch of the files, like one stream of a plain parallel read,
 * and the other ranks' runs in them come from the cache.  -1: no such rank (owner_at decides). */
static int part_owner(const uint64_t *ext, size_t nfiles, const ck_chunk *c, const lc_need *const *all, const long *at, int nranks) {
    if (c->length > SMALL_ITEM) return -1; /* large items combine CRCs instead */
    int r = file_part(ext, nfiles, c, nranks);
    return r >= 0 && need_at(all, at, r) ? r : -1;
}

/* Ranks sharing one page cache: a large item checked whole by its owner (no combined check: column
 * blocks, many runs a reader) goes to the rank whose part of the files holds it, as a small item does,
 * when that rank needs about as much of it as any (a near tie, as owner_at counts them).  Each owner
 * then streams one stretch of the files, as a plain parallel read does, where owners by contiguous
 * item numbers (owner_at) each took a few tensors and hopped between every rank's file.  -1: no such
 * rank. */
static int part_owner_large(const uint64_t *ext, size_t nfiles, const ck_chunk *c, const lc_need *const *all, const long *at,
                            int nranks) {
    int r = file_part(ext, nfiles, c, nranks);
    uint64_t bar = tie_bar(all, at, nranks);
    return r >= 0 && bar && need_at(all, at, r) >= bar ? r : -1;
}

/* A place in one rank's wire list: its current record x (with its runs g) while `have`. */
typedef struct lc_cur {
    const uint8_t *q, *end;
    uint64_t next;
    int have;
    lc_need x;
    lc_rng g;
} lc_cur;

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

/* Moves c to its next record; 0 if the list is malformed (items ascend by construction). */
static int cur_step(lc_cur *c) {
    c->have = c->q < c->end;
    return !c->have || next_record(&c->q, c->end, &c->next, &c->x, &c->g);
}

/* Marks in ck->peer_checks the items of this rank's list (cur[me]) that another rank owns (1) or that
 * are checked by combining CRCs (2, with this rank's share in ck->combs).  Every list is read once,
 * in step, as the items ascend in each.  Out of memory (plan_failed 1), or a malformed list
 * (plan_failed 2), it marks nothing: this load then fails (lc_finish), as the other ranks count on
 * this one's share. */
static void mark_peers(sck_ckpt *ck, lc_cur *cur, int nranks, int me) {
    const size_t *base = ck->m.item_base;
    const uint64_t *ext = ck->one_cache ? ck->m.file_end : NULL;
    uint8_t **pc = calloc(ck->m.n ? ck->m.n : 1, sizeof *pc);
    ck_comb *cbs = NULL;
    size_t ncb = 0, cbcap = 0, ei = 0;
    const lc_need **all = malloc((size_t)nranks * sizeof *all);
    const lc_rng **rng = malloc((size_t)nranks * sizeof *rng);
    long *at = malloc((size_t)nranks * sizeof *at);
    int ok = pc && all && rng && at, bad = 0;
    for (int r = 0; ok && r < nranks; r++) {
        all[r] = &cur[r].x, rng[r] = &cur[r].g;
        if (!cur_step(&cur[r])) ok = 0, bad = 1;
    }
    while (ok && cur[me].have) {
        uint64_t item = cur[me].x.item;
        for (int r = 0; ok && r < nranks; r++) {
            while (r != me && ok && cur[r].have && cur[r].x.item < item)
                if (!cur_step(&cur[r])) ok = 0, bad = 1;
            at[r] = cur[r].have && cur[r].x.item == item ? 0 : -1;
        }
        while (ok && ei < ck->m.n && base[ei + 1] <= item) ei++;
        if (ok && ei == ck->m.n) ok = 0, bad = 1; /* not an item of this model */
        if (ok && ncb == cbcap) {
            size_t c2 = cbcap ? 2 * cbcap : 64;
            ck_comb *p = realloc(cbs, c2 * sizeof *p);
            if (p) cbs = p, cbcap = c2;
            else ok = 0;
        }
        if (!ok) break;
        size_t ci = item - base[ei];
        const lc_need *const *a = all;
        int owner = ext ? part_owner(ext, ck->m.nfiles, &ck->m.e[ei].chunks[ci], a, at, nranks) : -1;
        if (owner < 0) owner = owner_at(a, at, nranks, item, base[ck->m.n]);
        int comb = plan_comb(&ck->m.e[ei].chunks[ci], (const lc_rng *const *)rng, at, nranks, me, owner, &cbs[ncb]);
        if (comb < 0) ok = 0;
        if (comb == 0 && ext && ck->m.e[ei].chunks[ci].length > SMALL_ITEM) { /* checked whole by one rank */
            int po = part_owner_large(ext, ck->m.nfiles, &ck->m.e[ei].chunks[ci], a, at, nranks);
            if (po >= 0) owner = po;
        }
        if (ok && !(comb <= 0 && owner == me)) {
            if (!pc[ei] && !(pc[ei] = calloc(ck->m.e[ei].nchunks, 1))) {
                ok = 0;
                if (comb > 0) free(cbs[ncb].r);
                break;
            }
            pc[ei][ci] = (uint8_t)(comb > 0 ? 2 : 1);
            if (comb > 0) cbs[ncb].ei = ei, cbs[ncb].ci = ci, cbs[ncb++].item = item;
        }
        if (ok && !cur_step(&cur[me])) ok = 0, bad = 1;
    }
    free(all);
    free(rng);
    free(at);
    if (!ok) {
        for (size_t i = 0; pc && i < ck->m.n; i++) free(pc[i]);
        for (size_t i = 0; i < ncb; i++) free(cbs[i].r);
        free(pc);
        free(cbs);
        ck->plan_failed = bad ? 2 : 1;
        return;
    }
    ck->peer_checks = pc;
    ck->combs = cbs; /* by item, hence by (ei, ci) */
    ck->ncombs = ncb;
}

/* Whether the ranks read disjoint sets of files, as in a load with the split of the save (rank r reads
 * file r): then no item has two readers, every rank checks what it reads, and the lists need not be
 * made or sent.  One comm_agree_gather of a bitmap of the files this rank reads; every rank decides
 * from the same bytes.  Returns the agreed status: local, a communicator error, or SCK_ERR_FORMAT for
 * a malformed bitmap. */
static int files_disjoint(sck_comm *comm, const sck_ckpt *ck, const ck_reads *r, int local, int *disjoint) {
    size_t nb = (ck->m.nfiles + 7) / 8;
    uint8_t *mine = calloc(nb ? nb : 1, 1), *seen = calloc(nb ? nb : 1, 1);
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    if ((!mine || !seen || !counts) && !local) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    for (size_t j = 0; mine && !local && j < r->m; j++) mine[r->op[j].file / 8] |= (uint8_t)(1u << (r->op[j].file % 8));
    void *all = NULL;
    int rc = counts ? comm_agree_gather(comm, local, mine, nb, &all, counts) : comm_agree(comm, local);
    *disjoint = 1;
    const uint8_t *p = all;
    for (int i = 0; !rc && i < comm->size; p += counts[i], i++) {
        if (counts[i] != nb || (nb && (p[nb - 1] >> (ck->m.nfiles - 8 * (nb - 1))) != 0)) {
            rc = sck_err(SCK_ERR_FORMAT, "%s: rank %d's list of the files it reads is malformed", ck->dir, i);
            break;
        }
        for (size_t k = 0; k < nb; k++) {
            if (seen[k] & p[k]) *disjoint = 0;
            seen[k] |= p[k];
        }
    }
    comm_gather_free(comm, all);
    free(counts);
    free(mine);
    free(seen);
    return rc;
}

int lc_assign(sck_comm *comm, sck_ckpt *ck, const ck_want *w, ck_reads *r, int local) {
    /* The model is the same on every rank, so every rank takes the same branch. */
    if (comm->size == 1 || !any_checksum(&ck->m)) return SCK_OK;
    int disjoint = 0, agreed = files_disjoint(comm, ck, r, local, &disjoint);
    if (agreed || disjoint) return agreed;
    size_t wlen = 0;
    uint8_t *wire = NULL;
    if (!local && ck->verify) local = lc_needs(ck, w, r, &wire, &wlen);
    size_t *counts = calloc((size_t)comm->size, sizeof *counts);
    lc_cur *cur = calloc((size_t)comm->size, sizeof *cur);
    if (!counts || !cur) {
        free(counts);
        free(cur);
        sck_big_free(wire);
        return comm_agree(comm, sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir));
    }
    void *all = NULL;
    int rc = comm_agree_gather(comm, local, wire, wlen, &all, counts);
    sck_big_free(wire);
    const uint8_t *p = all;
    for (int i = 0; !rc && i < comm->size; i++) {
        cur[i].q = p;
        cur[i].end = p + counts[i];
        p += counts[i];
    }
    if (!rc) mark_peers(ck, cur, comm->size, comm->rank);
    comm_gather_free(comm, all);
    free(counts);
    free(cur);
    if (!rc && comm_in_process(comm)) rc = lc_handoff(comm, ck, w, r, SCK_OK);
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
    const size_t *base = ck->m.item_base;
    sck_sort(s, n, sizeof *s, cmp_seg);
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
    return rc;
}

int lc_finish(sck_comm *comm, sck_ckpt *ck, int local) {
    if (comm->size == 1 || !any_checksum(&ck->m)) return comm_agree(comm, local);
    if (!local && ck->plan_failed == 2) local = sck_err(SCK_ERR_FORMAT, "%s: a rank's list of the items it reads is malformed: checksum checks not planned", ck->dir);
    else if (!local && ck->plan_failed) local = sck_err(SCK_ERR_NOMEM, "%s: out of memory planning checksum checks", ck->dir);
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
    comm_gather_free(comm, all);
    return comm_agree(comm, v);
}
