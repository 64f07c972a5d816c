/* box.c - n-d box arithmetic for resharding: intersections, flat-range decomposition, copy runs
 * between layouts, and the exactly-once coverage check over many chunks. */
#include "base/box.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

uint64_t box_numel(const sck_box *b) {
    uint64_t n = 1;
    for (int d = 0; d < b->ndim; d++) n *= (uint64_t)b->size[d];
    return n;
}

int box_empty(const sck_box *b) {
    for (int d = 0; d < b->ndim; d++)
        if (b->size[d] == 0) return 1;
    return 0;
}

/* off+size, saturated at INT64_MAX so unvalidated boxes cannot trigger signed overflow. */
static int64_t box_end(int64_t off, int64_t size) {
    if (size > 0 && off > INT64_MAX - size) return INT64_MAX;
    return off + size;
}

int box_intersect(const sck_box *a, const sck_box *b, sck_box *out) {
    if (a->ndim != b->ndim || a->ndim < 0 || a->ndim > SCK_MAX_DIMS) return 0;
    int64_t lo[SCK_MAX_DIMS], hi[SCK_MAX_DIMS];
    /* Most calls are misses (a box against every saved chunk of its tensor): nothing is written until
     * every dimension overlaps. */
    for (int d = 0; d < a->ndim; d++) {
        if (a->size[d] <= 0 || b->size[d] <= 0) return 0;
        lo[d] = a->off[d] > b->off[d] ? a->off[d] : b->off[d];
        int64_t ea = box_end(a->off[d], a->size[d]), eb = box_end(b->off[d], b->size[d]);
        hi[d] = ea < eb ? ea : eb;
        if (hi[d] <= lo[d]) return 0;
    }
    memset(out, 0, sizeof *out);
    out->ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        out->off[d] = lo[d];
        out->size[d] = hi[d] - lo[d];
    }
    return 1;
}

int box_within(const sck_box *b, const int64_t *shape) {
    if (b->ndim < 0 || b->ndim > SCK_MAX_DIMS) return 0;
    for (int d = 0; d < b->ndim; d++) {
        if (shape[d] < 0 || b->off[d] < 0 || b->size[d] < 0) return 0;
        /* Written as two comparisons so off+size is never formed. */
        if (b->off[d] > shape[d] || b->size[d] > shape[d] - b->off[d]) return 0;
    }
    return 1;
}

int box_equal(const sck_box *a, const sck_box *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->off[d] != b->off[d] || a->size[d] != b->size[d]) return 0;
    return 1;
}

void box_strides(const sck_box *b, int64_t *strides) {
    uint64_t s = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        strides[d] = (int64_t)s;
        s *= (uint64_t)b->size[d];
    }
}

/* ---- flat ranges ---------------------------------------------------------------------------- */

int box_from_flat(int ndim, const int64_t *shape, int64_t begin, int64_t count, sck_box *out) {
    if (ndim < 0 || ndim > SCK_MAX_DIMS || begin < 0 || count < 0) return -1;
    uint64_t numel;
    if (sck_numel(ndim, shape, &numel)) return -1;
    if ((uint64_t)count > numel || (uint64_t)begin > numel - (uint64_t)count) return -1;
    if (count == 0) return 0;
    if (ndim == 0) {
        memset(&out[0], 0, sizeof out[0]);
        return 1;
    }
    /* count > 0 implies every dim >= 1, so these strides are <= numel and cannot overflow. */
    uint64_t st[SCK_MAX_DIMS];
    st[ndim - 1] = 1;
    for (int d = ndim - 2; d >= 0; d--) st[d] = st[d + 1] * (uint64_t)shape[d + 1];

    uint64_t cur = (uint64_t)begin, end = cur + (uint64_t)count;
    int n = 0;
    /* Greedy: at each position take the outermost level whose whole sub-blocks fit, as many as
     * fit without leaving the enclosing slice.  Levels rise then fall, hence <= 2*ndim-1 pieces. */
    while (cur < end) {
        if (n >= 2 * ndim - 1) return -1; /* cannot happen; guards `out` */
        int lvl = 0;
        while (cur % st[lvl] != 0 || end - cur < st[lvl]) lvl++;
        uint64_t coord = (cur / st[lvl]) % (uint64_t)shape[lvl];
        uint64_t take = (uint64_t)shape[lvl] - coord;
        if ((end - cur) / st[lvl] < take) take = (end - cur) / st[lvl];
        sck_box *b = &out[n++];
        memset(b, 0, sizeof *b);
        b->ndim = ndim;
        for (int d = 0; d < ndim; d++) {
            if (d < lvl) {
                b->off[d] = (int64_t)((cur / st[d]) % (uint64_t)shape[d]);
                b->size[d] = 1;
            } else if (d == lvl) {
                b->off[d] = (int64_t)coord;
                b->size[d] = (int64_t)take;
            } else {
                b->off[d] = 0;
                b->size[d] = shape[d];
            }
        }
        cur += take * st[lvl];
    }
    return n;
}

/* ---- copy runs ------------------------------------------------------------------------------ */

/* 1 if ov lies inside b (same ndim; negative offsets/sizes are rejected so differences cannot overflow). */
static int box_contains(const sck_box *b, const sck_box *ov) {
    if (b->ndim != ov->ndim) return 0;
    for (int d = 0; d < b->ndim; d++) {
        if (b->off[d] < 0 || b->size[d] < 0 || ov->off[d] < b->off[d] || ov->size[d] < 0) return 0;
        if (box_end(ov->off[d], ov->size[d]) > box_end(b->off[d], b->size[d])) return 0;
    }
    return 1;
}

int box_runs(const sck_box *src, const int64_t *src_strides, const sck_box *dst, const sck_box *ov,
             size_t elem, box_run_fn fn, void *ctx) {
    if (ov->ndim < 0 || ov->ndim > SCK_MAX_DIMS || elem == 0)
        return sck_err(SCK_ERR_INVALID_ARG, "box_runs: bad ndim %d or element size %zu", ov->ndim, elem);
    if (!box_contains(src, ov) || !box_contains(dst, ov))
        return sck_err(SCK_ERR_INVALID_ARG, "box_runs: region is not inside both source and destination");
    if (box_empty(ov)) return 0;

    int nd = ov->ndim;
    int64_t ss[SCK_MAX_DIMS], ds[SCK_MAX_DIMS];
    if (src_strides) memcpy(ss, src_strides, (size_t)nd * sizeof ss[0]);
    else box_strides(src, ss);
    box_strides(dst, ds);

    /* Collapse trailing dims while stepping them moves both layouts by exactly the run so far;
     * size-1 dims never step, so their strides do not matter. */
    uint64_t run = 1;
    int k = nd; /* dims [0,k) are iterated, [k,nd) are inside one run */
    while (k > 0) {
        int d = k - 1;
        if (ov->size[d] != 1) {
            if ((uint64_t)ss[d] != run || (uint64_t)ds[d] != run) break;
            run *= (uint64_t)ov->size[d];
        }
        k--;
    }

    /* Element offsets of ov's first element; unsigned so stray values wrap instead of being UB. */
    uint64_t s = 0, t = 0;
    for (int d = 0; d < nd; d++) {
        s += (uint64_t)(ov->off[d] - src->off[d]) * (uint64_t)ss[d];
        t += (uint64_t)(ov->off[d] - dst->off[d]) * (uint64_t)ds[d];
    }
    int64_t idx[SCK_MAX_DIMS] = {0};
    uint64_t run_bytes = run * elem;
    uint64_t ps = 0, pt = 0, pn = 0; /* pending run, grown while the next one is adjacent in both */
    for (;;) {
        uint64_t sb = s * elem, tb = t * elem;
        if (pn && sb == ps + pn && tb == pt + pn) {
            pn += run_bytes;
        } else {
            if (pn) {
                int r = fn(ctx, ps, pt, pn);
                if (r) return r;
            }
            ps = sb; pt = tb; pn = run_bytes;
        }
        /* Odometer over the iterated dims, innermost fastest: increasing destination order. */
        int d = k - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < ov->size[d]) {
                s += (uint64_t)ss[d];
                t += (uint64_t)ds[d];
                break;
            }
            idx[d] = 0;
            s -= (uint64_t)(ov->size[d] - 1) * (uint64_t)ss[d];
            t -= (uint64_t)(ov->size[d] - 1) * (uint64_t)ds[d];
        }
        if (d < 0) break;
    }
    return pn ? fn(ctx, ps, pt, pn) : 0;
}

int box_single_run(const sck_box *src, const sck_box *dst, const sck_box *ov, size_t elem, uint64_t *src_off, uint64_t *dst_off,
                   uint64_t *len) {
    int nd = ov->ndim;
    if (nd < 0 || nd > SCK_MAX_DIMS || src->ndim != nd || dst->ndim != nd) return 0;
    int d0 = 0;
    while (d0 < nd && ov->size[d0] == 1) d0++; /* leading dims it does not step */
    for (int d = d0 + 1; d < nd; d++) /* after the first dim it steps, whole rows of both */
        if (ov->size[d] != src->size[d] || ov->size[d] != dst->size[d]) return 0;
    if (d0 < nd && ov->size[d0] <= 0) return 0;
    uint64_t s = 0, t = 0, ss = 1, ts = 1; /* unsigned, as in box_runs */
    for (int d = nd - 1; d >= 0; d--) {
        s += (uint64_t)(ov->off[d] - src->off[d]) * ss;
        t += (uint64_t)(ov->off[d] - dst->off[d]) * ts;
        ss *= (uint64_t)src->size[d];
        ts *= (uint64_t)dst->size[d];
    }
    *src_off = s * elem;
    *dst_off = t * elem;
    *len = box_numel(ov) * elem;
    return 1;
}

typedef struct { uint8_t *dst; const uint8_t *src; } box_copy_ctx;

static int box_copy_run(void *ctx, uint64_t src_off, uint64_t dst_off, uint64_t nbytes) {
    box_copy_ctx *c = ctx;
    memcpy(c->dst + dst_off, c->src + src_off, (size_t)nbytes);
    return 0;
}

void box_copy(void *dst, const sck_box *dbox, const void *src, const sck_box *sbox,
              const int64_t *src_strides, const sck_box *ov, size_t elem) {
    box_copy_ctx c = { dst, src };
    (void)box_runs(sbox, src_strides, dbox, ov, elem, box_copy_run, &c);
}

/* ---- exact cover ---------------------------------------------------------------------------- */

typedef struct { int64_t key; size_t idx; } cover_key;

static int cmp_cover_key(const void *pa, const void *pb) {
    const cover_key *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return a < b ? -1 : a > b;
}

/* Both boxes are within the shape, so off+size cannot overflow. */
static int boxes_overlap(const sck_box *a, const sck_box *b, int ndim) {
    for (int d = 0; d < ndim; d++)
        if (a->off[d] >= b->off[d] + b->size[d] || b->off[d] >= a->off[d] + a->size[d]) return 0;
    return 1;
}

static void set_bad(long *bad_a, long *bad_b, size_t i, size_t j) {
    size_t lo = i < j ? i : j, hi = i < j ? j : i;
    if (bad_a) *bad_a = (long)lo;
    if (bad_b) *bad_b = (long)hi;
}

/* Number of pairs among m boxes whose intervals in dim d intersect: all pairs minus those where one
 * ends at or before the other starts.  starts/ends are scratch of m entries each. */
static uint64_t overlapping_pairs(const sck_box *boxes, const size_t *live, size_t m, int d,
                                  int64_t *starts, int64_t *ends) {
    for (size_t i = 0; i < m; i++) {
        const sck_box *b = &boxes[live[i]];
        starts[i] = b->off[d];
        ends[i] = b->off[d] + b->size[d];
    }
    qsort(starts, m, sizeof *starts, cmp_i64);
    qsort(ends, m, sizeof *ends, cmp_i64);
    uint64_t disjoint = 0;
    size_t e = 0;
    for (size_t i = 0; i < m; i++) {
        while (e < m && ends[e] <= starts[i]) e++;
        disjoint += e;
    }
    return (uint64_t)m * (m - 1) / 2 - disjoint;
}

/* Finds an overlapping pair among the live (non-empty) boxes.  Sweeps the dim where the fewest
 * pairs' intervals meet, comparing only those pairs: O(ndim*m log m + such pairs).
 * Falls back to comparing all pairs if scratch memory cannot be had. */
static int find_overlap(int ndim, const sck_box *boxes, const size_t *live, size_t m,
                        size_t *oi, size_t *oj) {
    int64_t *starts = malloc((m ? m : 1) * sizeof *starts);
    int64_t *ends = malloc((m ? m : 1) * sizeof *ends);
    cover_key *keys = malloc((m ? m : 1) * sizeof *keys);
    if (!starts || !ends || !keys) {
        free(starts); free(ends); free(keys);
        for (size_t i = 0; i < m; i++)
            for (size_t j = i + 1; j < m; j++)
                if (boxes_overlap(&boxes[live[i]], &boxes[live[j]], ndim)) {
                    *oi = live[i]; *oj = live[j];
                    return 1;
                }
        return 0;
    }
    int best = 0;
    uint64_t best_pairs = UINT64_MAX;
    for (int d = 0; d < ndim && best_pairs > 0; d++) {
        uint64_t p = overlapping_pairs(boxes, live, m, d, starts, ends);
        if (p < best_pairs) { best_pairs = p; best = d; }
    }
    free(starts);
    free(ends);
    for (size_t i = 0; i < m; i++) {
        keys[i].key = boxes[live[i]].off[best];
        keys[i].idx = live[i];
    }
    qsort(keys, m, sizeof *keys, cmp_cover_key);
    int found = 0;
    for (size_t i = 0; i < m && !found; i++) {
        const sck_box *a = &boxes[keys[i].idx];
        int64_t end = a->off[best] + a->size[best];
        for (size_t j = i + 1; j < m && keys[j].key < end; j++) {
            if (boxes_overlap(a, &boxes[keys[j].idx], ndim)) {
                *oi = keys[i].idx; *oj = keys[j].idx;
                found = 1;
                break;
            }
        }
    }
    free(keys);
    return found;
}

int box_cover_exact(int ndim, const int64_t *shape, const sck_box *boxes, size_t n, long *bad_a, long *bad_b) {
    if (bad_a) *bad_a = -1;
    if (bad_b) *bad_b = -1;
    uint64_t numel;
    /* A shape whose element count does not fit 64 bits cannot be checked (nor held): a "hole". */
    if (ndim < 0 || ndim > SCK_MAX_DIMS || sck_numel(ndim, shape, &numel)) return 0;
    for (size_t i = 0; i < n; i++) {
        if (boxes[i].ndim != ndim || !box_within(&boxes[i], shape)) {
            if (bad_a) *bad_a = (long)i;
            return 0;
        }
    }
    if (ndim == 0) { /* the single element: exactly one box must claim it */
        if (n == 1) return 1;
        if (n >= 2) set_bad(bad_a, bad_b, 0, 1);
        return 0;
    }

    size_t *live = malloc((n ? n : 1) * sizeof *live);
    size_t m = 0;
    uint64_t sum = 0;
    int excess = 0;
    for (size_t i = 0; i < n; i++) {
        if (box_empty(&boxes[i])) continue;
        if (live) live[m] = i;
        m++;
        /* Each volume is <= numel (box is within shape), so only the sum can overflow. */
        if (sck_add_overflow_u64(sum, box_numel(&boxes[i]), &sum)) excess = 1;
    }
    if (!live) { /* no scratch: compare every non-empty pair directly */
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (!box_empty(&boxes[i]) && !box_empty(&boxes[j]) &&
                    boxes_overlap(&boxes[i], &boxes[j], ndim)) {
                    set_bad(bad_a, bad_b, i, j);
                    return 0;
                }
    } else {
        size_t oi, oj;
        int found = find_overlap(ndim, boxes, live, m, &oi, &oj);
        free(live);
        if (found) {
            set_bad(bad_a, bad_b, oi, oj);
            return 0;
        }
    }
    /* Disjoint and inside: the volumes add up to numel exactly when nothing is missing. */
    return !excess && sum == numel;
}
