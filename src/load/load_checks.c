/* load_checks.c - one checker per item on a resharded load (see load_checks.h). */
#include "load/load_checks.h"

#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "load/load_handoff.h"

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

int lc_needs(sck_ckpt *ck, const ck_want *w, const ck_reads *r, uint8_t **wire, size_t *wire_len, size_t *nrec) {
    *wire = NULL;
    *wire_len = 0;
    size_t records = 0;
    const size_t *base = ck->m.item_base;
    /* One record per checksummed overlap, by item (the reads are in file order, which for this
     * rank's own items is usually item order already): no table as large as the whole model. */
    lc_rec *rec = sck_big_alloc((r->m ? r->m : 1) * sizeof *rec);
    if (!rec) return sck_err(SCK_ERR_NOMEM, "%s: out of memory sharing out checksum checks", ck->dir);
    size_t n = 0;
    int sorted = 1;
    for (size_t j = 0; j < r->m; j++) {
        /* The ops go in file order, their entries and chunk records in model order: asked for ahead,
         * the entry first, as each miss here otherwise waited on memory. */
        if (j + 2 * CK_AHEAD < r->m) __builtin_prefetch(&ck->m.e[r->op[j + 2 * CK_AHEAD].ei]);
        if (j + CK_AHEAD < r->m) __builtin_prefetch(&ck->m.e[r->op[j + CK_AHEAD].ei].chunks[r->op[j + CK_AHEAD].ci]);
        const read_op *o = &r->op[j];
        const ck_entry *ce = &ck->m.e[o->ei];
        const ck_chunk *c = &ce->chunks[o->ci];
        if (!c->has_crc) continue;
        rec[n] = (lc_rec){base[o->ei] + o->ci, o->elems * sck_dtype_size((sck_dtype)ce->dtype), j, o->chunk};
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
            if (e + CK_AHEAD < n) { /* a box is read only for runs not worked out when planned */
                const read_op *a = &r->op[rec[e + CK_AHEAD].j];
                if (!rec[e + CK_AHEAD].whole && a->runs != 1) ckpt_prefetch_box(w[a->k].box);
            }
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
        records++;
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
    if (nrec) *nrec = records;
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
     * read many at a time (one batch, src/load/read_plan.c), so an owner of every other item would read them all. */
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
    if (readers < 2) return 0; /* its only reader checks it whole, in the same pass (src/load/item_check.c) */
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

/* One record of a rank's wire list, decoded: the item and bytes (x) and where its runs are (g). */
typedef struct lc_dec {
    lc_need x;
    lc_rng g;
} lc_dec;

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

/* Decodes the wire list [p, +n) into *out (sck_big_alloc'ed; NULL when empty), *nout records by
 * ascending item.  most: how many records it holds at most (0: not known; a record takes 3 bytes at
 * least).  Returns SCK_OK, SCK_ERR_FORMAT for a malformed list, SCK_ERR_NOMEM. */
static int decode_list(const uint8_t *p, size_t n, size_t most, lc_dec **out, size_t *nout) {
    *out = NULL;
    *nout = 0;
    if (!n) return SCK_OK;
    if (!most || most > n / 3) most = n / 3;
    lc_dec *d = sck_big_alloc((most + 1) * sizeof *d);
    if (!d) return SCK_ERR_NOMEM;
    const uint8_t *q = p, *end = p + n;
    uint64_t next = 0;
    size_t k = 0;
    while (q < end) { /* items ascend by construction */
        if (k == most || !next_record(&q, end, &next, &d[k].x, &d[k].g)) {
            sck_big_free(d);
            return SCK_ERR_FORMAT;
        }
        k++;
    }
    *out = d;
    *nout = k;
    return SCK_OK;
}

/* Marks in ck->peer_checks the items of this rank's list (lists[me]) that another rank owns (1) or
 * that are checked by combining CRCs (2, with this rank's share in ck->combs).  Every list is walked
 * once, in step, as the items ascend in each.  Out of memory (plan_failed 1), or a malformed list
 * (bad: plan_failed 2), it marks nothing: this load then fails (lc_finish), as the other ranks count
 * on this one's share. */
static void mark_peers(sck_ckpt *ck, const lc_dec *const *lists, const size_t *counts, int nranks, int me, int bad) {
    const size_t *base = ck->m.item_base;
    const uint64_t *ext = ck->one_cache ? ck->m.file_end : NULL;
    uint8_t *pc = calloc(base[ck->m.n] ? base[ck->m.n] : 1, 1); /* by item: one allocation, not one an entry */
    ck_comb *cbs = NULL;
    size_t ncb = 0, cbcap = 0, ei = 0;
    const lc_need **all = malloc((size_t)nranks * sizeof *all);
    const lc_rng **rng = malloc((size_t)nranks * sizeof *rng);
    long *at = malloc((size_t)nranks * sizeof *at);
    size_t *cur = calloc((size_t)nranks, sizeof *cur); /* each list's first record not before the item */
    int ok = pc && all && rng && at && cur && !bad;
    for (size_t j = 0; ok && j < counts[me]; j++) {
        uint64_t item = lists[me][j].x.item;
        for (int r = 0; r < nranks; r++) {
            const lc_dec *l = lists[r];
            size_t i = r == me ? j : cur[r];
            while (i < counts[r] && l[i].x.item < item) i++;
            cur[r] = i;
            /* all[r][0] and rng[r][0]: rank r's record of the item, when at[r] is 0 */
            at[r] = i < counts[r] && l[i].x.item == item ? 0 : -1;
            if (!at[r]) all[r] = &l[i].x, rng[r] = &l[i].g;
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
            pc[item] = (uint8_t)(comb > 0 ? 2 : 1);
            if (comb > 0) cbs[ncb].ei = ei, cbs[ncb].ci = ci, cbs[ncb++].item = item;
        }
    }
    free(all);
    free(rng);
    free(at);
    free(cur);
    if (!ok) {
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

/* What a thread rank shows the others of its list: valid until lc_assign's last collective. */
typedef struct lc_view {
    const lc_dec *d;
    size_t n;
} lc_view;

/* Thread ranks: each decodes its own list and the others walk the decoded records through the shared
 * address space, where each decoding every rank's list cost n times the work.  *mine is the caller's
 * to free once every rank is done (after a later collective).  Sets lists/counts (freed by the
 * caller) or returns the agreed error. */
static int share_decoded(sck_comm *comm, const uint8_t *wire, size_t wlen, size_t nrec, int local, lc_dec **mine, const lc_dec ***lists,
                         size_t **counts) {
    lc_view v = {NULL, 0};
    if (!local) {
        int rc = decode_list(wire, wlen, nrec, mine, &v.n);
        v.d = *mine;
        if (rc) local = sck_err(rc, rc == SCK_ERR_NOMEM ? "out of memory sharing out checksum checks" : "this rank's list of checksum needs is malformed");
    }
    size_t *cnt = calloc((size_t)comm->size, sizeof *cnt);
    const lc_dec **l = calloc((size_t)comm->size, sizeof *l);
    if ((!cnt || !l) && !local) local = sck_err(SCK_ERR_NOMEM, "out of memory sharing out checksum checks");
    void *all = NULL;
    int rc = cnt && l ? comm_agree_gather(comm, local, &v, sizeof v, &all, cnt) : comm_agree(comm, local);
    for (int i = 0; !rc && i < comm->size; i++) {
        lc_view o;
        if (cnt[i] != sizeof o) {
            rc = comm_agree(comm, sck_err(SCK_ERR_FORMAT, "rank %d's list of checksum needs is malformed", i));
            break;
        }
        memcpy(&o, (const uint8_t *)all + i * sizeof o, sizeof o);
        l[i] = o.d, cnt[i] = o.n;
    }
    comm_gather_free(comm, all);
    if (rc) {
        free(cnt);
        free(l);
        return rc;
    }
    *lists = l;
    *counts = cnt;
    return SCK_OK;
}

/* Other ranks: every rank's wire list gathered (*all: the caller frees it with comm_gather_free after
 * mark_peers, whose runs point into it) and decoded here.  *bad: 1 if a list was malformed, -1 out of
 * memory. */
static int gather_decoded(sck_comm *comm, const uint8_t *wire, size_t wlen, int local, void **all, lc_dec ***lists, size_t **counts,
                          int *bad) {
    size_t *cnt = calloc((size_t)comm->size, sizeof *cnt);
    lc_dec **l = calloc((size_t)comm->size, sizeof *l);
    if ((!cnt || !l) && !local) local = sck_err(SCK_ERR_NOMEM, "out of memory sharing out checksum checks");
    *all = NULL;
    int rc = cnt && l ? comm_agree_gather(comm, local, wire, wlen, all, cnt) : comm_agree(comm, local);
    const uint8_t *p = *all;
    *bad = 0;
    for (int i = 0; !rc && i < comm->size; i++) {
        size_t n = 0, bytes = cnt[i];
        int e = decode_list(p, bytes, 0, &l[i], &n);
        if (e == SCK_ERR_FORMAT) *bad = 1;
        else if (e && !*bad) *bad = -1;
        cnt[i] = e ? 0 : n;
        p += bytes;
    }
    if (rc) {
        free(cnt);
        free(l);
        return rc;
    }
    *lists = l;
    *counts = cnt;
    return SCK_OK;
}

int lc_assign(sck_comm *comm, sck_ckpt *ck, const ck_want *w, ck_reads *r, int local) {
    /* The model is the same on every rank, so every rank takes the same branch. */
    if (comm->size == 1 || !any_checksum(&ck->m)) return SCK_OK;
    int disjoint = 0, agreed = files_disjoint(comm, ck, r, local, &disjoint);
    ck->files_disjoint = !agreed && disjoint;
    if (agreed || disjoint) return agreed;
    size_t wlen = 0, nrec = 0;
    uint8_t *wire = NULL;
    if (!local && ck->verify) local = lc_needs(ck, w, r, &wire, &wlen, &nrec);
    size_t *counts = NULL;
    int rc;
    if (comm_in_process(comm)) {
        lc_dec *mine = NULL;
        const lc_dec **lists = NULL;
        /* The records point into each rank's wire list: both kept until lc_handoff's last agreement,
         * when no rank reads them any more. */
        rc = share_decoded(comm, wire, wlen, nrec, local, &mine, &lists, &counts);
        if (!rc) mark_peers(ck, lists, counts, comm->size, comm->rank, 0);
        if (!rc) rc = lc_handoff(comm, ck, w, r, SCK_OK);
        free(lists);
        sck_big_free(mine);
    } else {
        lc_dec **lists = NULL;
        void *all = NULL;
        int bad = 0;
        rc = gather_decoded(comm, wire, wlen, local, &all, &lists, &counts, &bad);
        if (!rc && bad < 0) ck->plan_failed = 1;
        else if (!rc) mark_peers(ck, (const lc_dec *const *)lists, counts, comm->size, comm->rank, bad);
        for (int i = 0; lists && i < comm->size; i++) sck_big_free(lists[i]);
        free(lists);
        comm_gather_free(comm, all);
    }
    free(counts);
    sck_big_free(wire);
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
    /* Every rank knows it alike (lc_assign): the ranks checked whole items only, there is nothing to
     * gather, and the load's last collective is one agreement, not two. */
    if (ck->files_disjoint) return comm_agree(comm, local);
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
