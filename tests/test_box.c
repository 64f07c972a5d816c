/* test_box.c - box arithmetic: exhaustive flat-range decomposition, copy runs against a naive
 * element-by-element reference, and exact-cover checks (tilings, holes, overlaps, scale). */
#include <stdlib.h>

#include "base/box.h"
#include "harness.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static sck_box mkbox(int ndim, const int64_t *off, const int64_t *size) {
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = ndim;
    for (int d = 0; d < ndim; d++) { b.off[d] = off[d]; b.size[d] = size[d]; }
    return b;
}

static sck_box box2(int64_t o0, int64_t o1, int64_t s0, int64_t s1) {
    int64_t off[2] = { o0, o1 }, size[2] = { s0, s1 };
    return mkbox(2, off, size);
}

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
    return *x;
}
static int64_t rng_below(uint64_t *x, int64_t n) { return n <= 0 ? 0 : (int64_t)(rng_next(x) % (uint64_t)n); }

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* Flat row-major index (over `shape`) of the element of box b at position `lin` of b's own row-major order. */
static int64_t flat_of_box_elem(const sck_box *b, const int64_t *shape, int64_t lin) {
    int64_t coord[SCK_MAX_DIMS];
    for (int d = b->ndim - 1; d >= 0; d--) {
        coord[d] = b->off[d] + lin % b->size[d];
        lin /= b->size[d];
    }
    int64_t f = 0;
    for (int d = 0; d < b->ndim; d++) f = f * shape[d] + coord[d];
    return f;
}

/* ---- basics --------------------------------------------------------------------------------- */

TEST(box_numel_empty_equal) {
    sck_box a = box2(1, 2, 3, 4);
    CHECK(box_numel(&a) == 12);
    CHECK(!box_empty(&a));
    sck_box z = box2(0, 0, 3, 0);
    CHECK(box_numel(&z) == 0);
    CHECK(box_empty(&z));
    sck_box s;
    memset(&s, 0, sizeof s);
    CHECK(box_numel(&s) == 1); /* 0-d: one element */
    CHECK(!box_empty(&s));
    sck_box b = box2(1, 2, 3, 4);
    CHECK(box_equal(&a, &b));
    b.off[1] = 3;
    CHECK(!box_equal(&a, &b));
    b = a;
    b.ndim = 1;
    CHECK(!box_equal(&a, &b));
    /* Entries past ndim do not matter. */
    sck_box c = a, e = a;
    c.off[5] = 9;
    e.size[7] = 4;
    CHECK(box_equal(&c, &e));
}

TEST(box_intersect_cases) {
    sck_box a = box2(0, 0, 4, 4), b = box2(2, 3, 5, 5), r;
    REQUIRE(box_intersect(&a, &b, &r) == 1);
    CHECK(r.ndim == 2 && r.off[0] == 2 && r.off[1] == 3 && r.size[0] == 2 && r.size[1] == 1);
    /* Touching edges share no element. */
    sck_box c = box2(4, 0, 2, 4);
    CHECK(box_intersect(&a, &c, &r) == 0);
    /* Contained box intersects to itself. */
    sck_box in = box2(1, 1, 2, 2);
    REQUIRE(box_intersect(&a, &in, &r) == 1);
    CHECK(box_equal(&r, &in));
    /* Empty box never intersects. */
    sck_box z = box2(1, 1, 0, 2);
    CHECK(box_intersect(&a, &z, &r) == 0);
    /* ndim mismatch. */
    int64_t o1[1] = { 0 }, s1[1] = { 4 };
    sck_box one = mkbox(1, o1, s1);
    CHECK(box_intersect(&a, &one, &r) == 0);
    /* 0-d boxes always share their single element. */
    sck_box p, q;
    memset(&p, 0, sizeof p);
    memset(&q, 0, sizeof q);
    r.ndim = 7;
    CHECK(box_intersect(&p, &q, &r) == 1);
    CHECK(r.ndim == 0);
    /* Huge unvalidated extents do not overflow. */
    sck_box h1 = box2(INT64_MAX - 1, 0, INT64_MAX, 1), h2 = box2(INT64_MAX - 2, 0, 5, 1);
    REQUIRE(box_intersect(&h1, &h2, &r) == 1);
    CHECK(r.off[0] == INT64_MAX - 1 && r.size[0] == 1);
}

TEST(box_within_bounds_and_overflow) {
    int64_t shape[2] = { 4, 6 };
    sck_box b = box2(0, 0, 4, 6);
    CHECK(box_within(&b, shape));
    b = box2(4, 6, 0, 0); /* empty at the far corner is inside */
    CHECK(box_within(&b, shape));
    b = box2(1, 2, 3, 5);
    CHECK(!box_within(&b, shape));
    b = box2(-1, 0, 1, 1);
    CHECK(!box_within(&b, shape));
    b = box2(0, 0, -1, 1);
    CHECK(!box_within(&b, shape));
    b = box2(5, 0, 0, 1);
    CHECK(!box_within(&b, shape));
    int64_t neg[2] = { -4, 6 };
    b = box2(0, 0, 0, 1);
    CHECK(!box_within(&b, neg));

    /* Near INT64_MAX: off+size would overflow; must be rejected, not wrap. */
    int64_t big[1] = { INT64_MAX };
    int64_t o[1] = { INT64_MAX - 1 }, s[1] = { 2 };
    sck_box h = mkbox(1, o, s);
    CHECK(!box_within(&h, big));
    o[0] = INT64_MAX; s[0] = INT64_MAX;
    h = mkbox(1, o, s);
    CHECK(!box_within(&h, big));
    o[0] = 1; s[0] = INT64_MAX;
    h = mkbox(1, o, s);
    CHECK(!box_within(&h, big));
    o[0] = 1; s[0] = INT64_MAX - 1;
    h = mkbox(1, o, s);
    CHECK(box_within(&h, big));
    o[0] = INT64_MAX; s[0] = 0;
    h = mkbox(1, o, s);
    CHECK(box_within(&h, big));
    int64_t small[1] = { 10 };
    o[0] = 5; s[0] = INT64_MAX;
    h = mkbox(1, o, s);
    CHECK(!box_within(&h, small));

    sck_box z;
    memset(&z, 0, sizeof z);
    CHECK(box_within(&z, NULL)); /* 0-d never reads shape */
    z.ndim = SCK_MAX_DIMS + 1;
    CHECK(!box_within(&z, shape));
}

TEST(box_strides_row_major) {
    int64_t off[4] = { 9, 9, 9, 9 }, size[4] = { 2, 3, 4, 5 }, st[4];
    sck_box b = mkbox(4, off, size);
    box_strides(&b, st);
    CHECK(st[0] == 60 && st[1] == 20 && st[2] == 5 && st[3] == 1);
    sck_box z;
    memset(&z, 0, sizeof z);
    box_strides(&z, st); /* 0-d: writes nothing, must not crash */
}

/* ---- box_from_flat ------------------------------------------------------------------------- */

/* Decomposes [begin, begin+count) and checks every stated property; returns number of boxes. */
static int check_flat(int ndim, const int64_t *shape, int64_t begin, int64_t count, unsigned char *mark) {
    sck_box out[2 * SCK_MAX_DIMS];
    int n = box_from_flat(ndim, shape, begin, count, out);
    if (n < 0) { th_fail(__FILE__, __LINE__, "box_from_flat rejected a valid range"); return n; }
    int64_t total = numel_of(ndim, shape);
    int maxn = ndim == 0 ? 1 : 2 * ndim - 1;
    if (count == 0 && n != 0) th_fail(__FILE__, __LINE__, "count 0 gave boxes");
    if (count > 0 && (n < 1 || n > maxn)) th_fail(__FILE__, __LINE__, "box count out of [1, 2*ndim-1]");
    if (count == total && total > 0 && ndim > 0) {
        int64_t zero[SCK_MAX_DIMS] = { 0 };
        sck_box full = mkbox(ndim, zero, shape);
        if (n != 1 || !box_equal(&out[0], &full)) th_fail(__FILE__, __LINE__, "whole tensor is not one full box");
    }
    memset(mark, 0, (size_t)total);
    int64_t expect = begin;
    for (int i = 0; i < n; i++) {
        if (out[i].ndim != ndim) th_fail(__FILE__, __LINE__, "piece ndim");
        if (!box_within(&out[i], shape)) { th_fail(__FILE__, __LINE__, "piece outside shape"); continue; }
        if (box_empty(&out[i])) th_fail(__FILE__, __LINE__, "empty piece");
        int64_t v = (int64_t)box_numel(&out[i]);
        /* Each piece's row-major elements must be the next flat indexes in order: this checks both
         * that the piece is contiguous and that the concatenation is the range. */
        for (int64_t k = 0; k < v; k++) {
            int64_t f = ndim == 0 ? 0 : flat_of_box_elem(&out[i], shape, k);
            if (f != expect) { th_fail(__FILE__, __LINE__, "piece element out of flat order"); return n; }
            mark[f]++;
            expect++;
        }
    }
    if (expect != begin + count) th_fail(__FILE__, __LINE__, "pieces do not add up to count");
    for (int64_t f = 0; f < total; f++) {
        int want = f >= begin && f < begin + count;
        if (mark[f] != want) { th_fail(__FILE__, __LINE__, "flat mark mismatch"); break; }
    }
    return n;
}

TEST(box_from_flat_exhaustive_small_shapes) {
    static const int64_t shapes[][4] = {
        { 7 }, { 1 }, { 3, 4 }, { 1, 5 }, { 5, 1 }, { 2, 3, 4 }, { 3, 1, 2 }, { 1, 1, 1 },
        { 2, 2, 2, 2 }, { 2, 3, 1, 3 }, { 3, 2, 3, 2 }, { 1, 4, 1, 3 }, { 4, 1, 1, 1 },
    };
    static const int ndims[] = { 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 4 };
    unsigned char mark[256];
    long cases = 0;
    for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
        int64_t total = numel_of(ndims[s], shapes[s]);
        REQUIRE(total <= 256);
        for (int64_t b = 0; b <= total; b++)
            for (int64_t c = 0; b + c <= total; c++) {
                check_flat(ndims[s], shapes[s], b, c, mark);
                cases++;
            }
    }
    CHECK(cases > 1000);
}

TEST(box_from_flat_max_pieces_reached) {
    /* [4,5,6] range [7,107): rising 2 pieces, middle block, falling 2 pieces. */
    int64_t shape[3] = { 4, 5, 6 };
    sck_box out[2 * SCK_MAX_DIMS];
    REQUIRE(box_from_flat(3, shape, 7, 100, out) == 5);
    static const int64_t want[5][6] = {
        { 0, 1, 1, 1, 1, 5 }, { 0, 2, 0, 1, 3, 6 }, { 1, 0, 0, 2, 5, 6 }, { 3, 0, 0, 1, 2, 6 }, { 3, 2, 0, 1, 1, 5 },
    };
    for (int i = 0; i < 5; i++) {
        sck_box w = mkbox(3, want[i], want[i] + 3);
        CHECK(box_equal(&out[i], &w));
    }
    /* Aligned ranges collapse: two whole rows of dim 0. */
    REQUIRE(box_from_flat(3, shape, 30, 60, out) == 1);
    sck_box rows = mkbox(3, (int64_t[]){ 1, 0, 0 }, (int64_t[]){ 2, 5, 6 });
    CHECK(box_equal(&out[0], &rows));
    /* Inside one row. */
    REQUIRE(box_from_flat(3, shape, 8, 3, out) == 1);
    sck_box in = mkbox(3, (int64_t[]){ 0, 1, 2 }, (int64_t[]){ 1, 1, 3 });
    CHECK(box_equal(&out[0], &in));
}

TEST(box_from_flat_edge_and_invalid) {
    sck_box out[2 * SCK_MAX_DIMS];
    int64_t shape[2] = { 3, 4 };
    CHECK(box_from_flat(2, shape, -1, 1, out) == -1);
    CHECK(box_from_flat(2, shape, 0, -1, out) == -1);
    CHECK(box_from_flat(2, shape, 5, 8, out) == -1);
    CHECK(box_from_flat(2, shape, 13, 0, out) == -1);
    CHECK(box_from_flat(2, shape, 12, 0, out) == 0);
    CHECK(box_from_flat(2, shape, INT64_MAX, INT64_MAX, out) == -1);
    CHECK(box_from_flat(-1, shape, 0, 0, out) == -1);
    CHECK(box_from_flat(SCK_MAX_DIMS + 1, shape, 0, 0, out) == -1);
    /* Zero-size dim: only empty ranges. */
    int64_t zs[3] = { 2, 0, 3 };
    CHECK(box_from_flat(3, zs, 0, 0, out) == 0);
    CHECK(box_from_flat(3, zs, 0, 1, out) == -1);
    CHECK(box_from_flat(3, zs, 1, 0, out) == -1);
    /* Negative dim. */
    int64_t ng[2] = { 3, -4 };
    CHECK(box_from_flat(2, ng, 0, 0, out) == -1);
    /* 0-d: [0,1) is one 0-d box. */
    out[0].ndim = 5;
    CHECK(box_from_flat(0, NULL, 0, 1, out) == 1);
    CHECK(out[0].ndim == 0);
    CHECK(box_from_flat(0, NULL, 0, 0, out) == 0);
    CHECK(box_from_flat(0, NULL, 1, 0, out) == 0);
    CHECK(box_from_flat(0, NULL, 1, 1, out) == -1);
    CHECK(box_from_flat(0, NULL, 0, 2, out) == -1);
    /* Element count overflowing 64 bits is refused. */
    int64_t huge[2] = { INT64_MAX, 4 };
    CHECK(box_from_flat(2, huge, 0, 1, out) == -1);
}

TEST(box_from_flat_large_shape_and_max_dims) {
    sck_box out[2 * SCK_MAX_DIMS];
    int64_t shape[3] = { 1 << 20, 1 << 20, 1 << 20 }; /* 2^60 elements */
    int64_t begin = ((int64_t)5 << 40) + ((int64_t)7 << 20) + 3, count = ((int64_t)9 << 40) + 11;
    int n = box_from_flat(3, shape, begin, count, out);
    REQUIRE(n == 5);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        CHECK(box_within(&out[i], shape));
        sum += box_numel(&out[i]);
    }
    CHECK(sum == (uint64_t)count);
    CHECK(out[0].off[0] == 5 && out[0].off[1] == 7 && out[0].off[2] == 3 && out[0].size[2] == (1 << 20) - 3);
    CHECK(out[2].off[0] == 6 && out[2].size[0] == 8);
    int64_t full = (int64_t)1 << 60;
    REQUIRE(box_from_flat(3, shape, 0, full, out) == 1);
    CHECK(out[0].size[0] == 1 << 20 && out[0].size[1] == 1 << 20 && out[0].size[2] == 1 << 20);

    /* SCK_MAX_DIMS dims of 3, range [1, numel-1): rises 15 levels, a middle piece at dim 0, falls
     * 15 levels: 2*16-1 pieces exactly. */
    int64_t s16[SCK_MAX_DIMS], tot = 1;
    for (int d = 0; d < SCK_MAX_DIMS; d++) { s16[d] = 3; tot *= 3; }
    n = box_from_flat(SCK_MAX_DIMS, s16, 1, tot - 2, out);
    CHECK(n == 2 * SCK_MAX_DIMS - 1);
    sum = 0;
    for (int i = 0; i < n && i < 2 * SCK_MAX_DIMS; i++) sum += box_numel(&out[i]);
    CHECK(sum == (uint64_t)(tot - 2));
}

TEST(box_from_flat_random_4d) {
    /* Random 4-d shapes (dims 1..4) with every (begin, count) pair. */
    uint64_t x = 12345;
    unsigned char mark[256];
    for (int rep = 0; rep < 12; rep++) {
        int64_t shape[4];
        for (int d = 0; d < 4; d++) shape[d] = 1 + rng_below(&x, 4);
        int64_t total = numel_of(4, shape);
        for (int64_t b = 0; b <= total; b++)
            for (int64_t c = 0; b + c <= total; c++) check_flat(4, shape, b, c, mark);
    }
}

/* ---- box_runs / box_copy ------------------------------------------------------------------- */

typedef struct {
    int calls;
    int stop_at;    /* return 7 on this call number (1-based); 0 = never */
    uint64_t last_dst_end;
    int out_of_order;
    uint64_t prev_s, prev_d, prev_n;
    int unmerged;   /* a run adjacent to the previous in both layouts (should have been merged) */
    uint64_t bytes;
} run_log;

static int log_run(void *ctx, uint64_t s, uint64_t d, uint64_t n) {
    run_log *l = ctx;
    l->calls++;
    if (l->calls > 1) {
        if (d < l->last_dst_end) l->out_of_order = 1;
        if (s == l->prev_s + l->prev_n && d == l->prev_d + l->prev_n) l->unmerged = 1;
    }
    if (n == 0) l->out_of_order = 1;
    l->last_dst_end = d + n;
    l->prev_s = s; l->prev_d = d; l->prev_n = n;
    l->bytes += n;
    return l->stop_at && l->calls == l->stop_at ? 7 : 0;
}

/* Element offset of global coordinate c in a layout of box b with strides st. */
static int64_t elem_off(const sck_box *b, const int64_t *st, const int64_t *c) {
    int64_t o = 0;
    for (int d = 0; d < b->ndim; d++) o += (c[d] - b->off[d]) * st[d];
    return o;
}

/* Copies via box_copy and checks every byte against a naive per-element copy; bytes outside ov
 * must stay untouched. Returns the callback log. */
static run_log check_copy(const sck_box *src, const int64_t *sst, const sck_box *dst, const sck_box *ov,
                          size_t elem, uint64_t seed) {
    int nd = src->ndim;
    int64_t st[SCK_MAX_DIMS], dstr[SCK_MAX_DIMS];
    if (sst) memcpy(st, sst, (size_t)nd * sizeof st[0]);
    else box_strides(src, st);
    box_strides(dst, dstr);
    int64_t span = 1; /* source buffer extent in elements */
    for (int d = 0; d < nd; d++) span += (src->size[d] - 1) * st[d];
    if (box_empty(src)) span = 1;
    size_t sbytes = (size_t)span * elem, dbytes = (size_t)(box_numel(dst) ? box_numel(dst) : 1) * elem;
    unsigned char *sbuf = malloc(sbytes), *dbuf = malloc(dbytes), *ref = malloc(dbytes);
    run_log log;
    memset(&log, 0, sizeof log);
    if (!sbuf || !dbuf || !ref) {
        th_fail(__FILE__, __LINE__, "malloc");
        free(sbuf); free(dbuf); free(ref);
        return log;
    }
    th_fill(sbuf, sbytes, seed);
    memset(dbuf, 0xA5, dbytes);
    memset(ref, 0xA5, dbytes);
    /* Naive reference. */
    int64_t n = (int64_t)box_numel(ov);
    for (int64_t k = 0; k < n && !box_empty(ov); k++) {
        int64_t c[SCK_MAX_DIMS], lin = k;
        for (int d = nd - 1; d >= 0; d--) { c[d] = ov->off[d] + lin % ov->size[d]; lin /= ov->size[d]; }
        memcpy(ref + elem_off(dst, dstr, c) * (int64_t)elem, sbuf + elem_off(src, st, c) * (int64_t)elem, elem);
    }
    box_copy(dbuf, dst, sbuf, src, sst, ov, elem);
    if (memcmp(dbuf, ref, dbytes) != 0) th_fail(__FILE__, __LINE__, "box_copy differs from naive reference");
    CHECK_OK(box_runs(src, sst, dst, ov, elem, log_run, &log));
    if (log.out_of_order) th_fail(__FILE__, __LINE__, "runs not in increasing destination order");
    if (log.unmerged) th_fail(__FILE__, __LINE__, "adjacent runs were not merged");
    if (log.bytes != (uint64_t)n * elem) th_fail(__FILE__, __LINE__, "runs do not add up to the region");
    free(sbuf); free(dbuf); free(ref);
    return log;
}

static sck_box random_box(uint64_t *x, int nd, const int64_t *shape) {
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t lo = rng_below(x, shape[d]), hi = rng_below(x, shape[d]);
        if (lo > hi) { int64_t t = lo; lo = hi; hi = t; }
        b.off[d] = lo;
        b.size[d] = hi - lo + 1;
    }
    return b;
}

TEST(box_copy_random_row_major) {
    uint64_t x = 777;
    int done = 0;
    for (int rep = 0; rep < 400; rep++) {
        int nd = 1 + (int)rng_below(&x, 4);
        int64_t shape[4];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rng_below(&x, 6);
        sck_box s = random_box(&x, nd, shape), t = random_box(&x, nd, shape), ov;
        if (!box_intersect(&s, &t, &ov)) continue;
        /* Sometimes a strict sub-region of the overlap. */
        if (rng_below(&x, 2)) {
            sck_box sub = random_box(&x, nd, shape), ov2;
            if (box_intersect(&ov, &sub, &ov2)) ov = ov2;
        }
        static const size_t elems[4] = { 1, 2, 4, 8 };
        check_copy(&s, NULL, &t, &ov, elems[rng_below(&x, 4)], (uint64_t)rep);
        done++;
    }
    CHECK(done > 100);
}

/* box_single_run agrees with box_runs: whenever it finds one run, box_runs reports exactly that run;
 * when box_runs reports one run, so does it (row blocks, flat slices, single rows and elements); it
 * declines every region of several runs. */
static int first_run(void *ctx, uint64_t s, uint64_t d, uint64_t n) {
    uint64_t *r = ctx;
    if (r[3]++ == 0) r[0] = s, r[1] = d, r[2] = n;
    return 0;
}

TEST(box_single_run_matches_box_runs) {
    uint64_t x = 4242;
    int singles = 0, many = 0;
    for (int rep = 0; rep < 3000; rep++) {
        int nd = 1 + (int)rng_below(&x, 4);
        int64_t shape[4];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rng_below(&x, 6);
        sck_box s = random_box(&x, nd, shape), t = random_box(&x, nd, shape), ov;
        if (rng_below(&x, 2)) /* row blocks of one tensor, as a reshard along dim 0 makes them */
            for (int d = 1; d < nd; d++) s.off[d] = t.off[d] = 0, s.size[d] = t.size[d] = shape[d];
        if (!box_intersect(&s, &t, &ov)) continue;
        size_t elem = (size_t)1 << rng_below(&x, 4);
        uint64_t r[4] = {0, 0, 0, 0}, so = 1, dof = 1, len = 1;
        int one = box_single_run(&s, &t, &ov, elem, &so, &dof, &len);
        CHECK(box_runs(&s, NULL, &t, &ov, elem, first_run, r) == 0);
        CHECK(one == (r[3] == 1));
        if (one) CHECK(so == r[0] && dof == r[1] && len == r[2] && len == box_numel(&ov) * elem);
        singles += one;
        many += !one;
    }
    CHECK(singles > 1000 && many > 200); /* both kinds seen (about 2000 and 300) */
    /* An empty region is no run. */
    sck_box a = box2(0, 0, 4, 4), e = box2(1, 0, 0, 4);
    uint64_t so, dof, len;
    CHECK(box_single_run(&a, &a, &e, 4, &so, &dof, &len) == 0);
}

TEST(box_copy_random_strided_sources) {
    /* Non-contiguous sources: permuted (transposed) strides and padded row strides. */
    uint64_t x = 4242;
    int done = 0;
    for (int rep = 0; rep < 400; rep++) {
        int nd = 1 + (int)rng_below(&x, 4);
        int64_t shape[4];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rng_below(&x, 6);
        sck_box s = random_box(&x, nd, shape), t = random_box(&x, nd, shape), ov;
        if (!box_intersect(&s, &t, &ov)) continue;
        int64_t st[4];
        if (rep % 2 == 0) {
            /* Physical order is a random permutation of the dims. */
            int perm[4] = { 0, 1, 2, 3 };
            for (int i = nd - 1; i > 0; i--) {
                int j = (int)rng_below(&x, i + 1), tmp = perm[i];
                perm[i] = perm[j]; perm[j] = tmp;
            }
            int64_t acc = 1;
            for (int i = nd - 1; i >= 0; i--) { st[perm[i]] = acc; acc *= s.size[perm[i]]; }
        } else {
            /* Row-major over a padded extent (like a narrowed view of a bigger tensor). */
            int64_t acc = 1;
            for (int d = nd - 1; d >= 0; d--) { st[d] = acc; acc *= s.size[d] + rng_below(&x, 3); }
        }
        check_copy(&s, st, &t, &ov, 1 + (size_t)rng_below(&x, 8), (uint64_t)rep + 99);
        done++;
    }
    CHECK(done > 100);
}

TEST(box_runs_merge_counts) {
    /* Same box, same layout: one run of the whole box. */
    int64_t o3[3] = { 2, 0, 4 }, s3[3] = { 3, 4, 5 };
    sck_box a = mkbox(3, o3, s3);
    run_log l = check_copy(&a, NULL, &a, &a, 4, 1);
    CHECK(l.calls == 1 && l.bytes == 240);

    /* Explicit row-major strides behave the same. */
    int64_t st[3] = { 20, 5, 1 };
    l = check_copy(&a, st, &a, &a, 4, 2);
    CHECK(l.calls == 1);

    /* Dim-0 slice of a row-major chunk into a destination with the same trailing extent: one run. */
    sck_box src = box2(0, 0, 10, 6), dst = box2(3, 0, 4, 6), ov;
    REQUIRE(box_intersect(&src, &dst, &ov));
    l = check_copy(&src, NULL, &dst, &ov, 2, 3);
    CHECK(l.calls == 1 && l.bytes == 4 * 6 * 2);

    /* Column slice: one run per row. */
    sck_box cols = box2(0, 2, 5, 3);
    sck_box full = box2(0, 0, 5, 8);
    l = check_copy(&full, NULL, &cols, &cols, 4, 4);
    CHECK(l.calls == 5);

    /* Transposed source [4,3] stored column-major: one element per run. */
    sck_box t = box2(0, 0, 4, 3);
    int64_t tst[2] = { 1, 4 };
    l = check_copy(&t, tst, &t, &t, 8, 5);
    CHECK(l.calls == 12);

    /* Size-1 dims with odd strides still merge (torch leaves their strides arbitrary). */
    int64_t o4[3] = { 0, 0, 0 }, s4[3] = { 1, 6, 1 }, st4[3] = { 999, 1, 77 };
    sck_box v = mkbox(3, o4, s4);
    l = check_copy(&v, st4, &v, &v, 4, 6);
    CHECK(l.calls == 1);

    /* Sub-box in the middle of a 3-d box whose trailing dims are whole: one run. */
    int64_t ob[3] = { 1, 0, 0 }, sb[3] = { 2, 4, 5 };
    sck_box mid = mkbox(3, ob, sb);
    int64_t oz[3] = { 0, 0, 0 }, sz[3] = { 5, 4, 5 };
    sck_box whole = mkbox(3, oz, sz);
    l = check_copy(&whole, NULL, &mid, &mid, 1, 7);
    CHECK(l.calls == 1);
}

TEST(box_runs_zero_d_and_empty) {
    sck_box z;
    memset(&z, 0, sizeof z);
    run_log l;
    memset(&l, 0, sizeof l);
    CHECK_OK(box_runs(&z, NULL, &z, &z, 8, log_run, &l));
    CHECK(l.calls == 1 && l.prev_s == 0 && l.prev_d == 0 && l.prev_n == 8);

    sck_box b = box2(0, 0, 3, 3), e = box2(1, 1, 0, 2);
    memset(&l, 0, sizeof l);
    CHECK_OK(box_runs(&b, NULL, &b, &e, 4, log_run, &l));
    CHECK(l.calls == 0);
}

TEST(box_runs_callback_stop_and_offsets) {
    /* Column slice [0..3) x [1..3) from a [3,4] source into a [3,2] destination: 3 runs. */
    sck_box src = box2(0, 0, 3, 4), dst = box2(0, 1, 3, 2);
    run_log l;
    memset(&l, 0, sizeof l);
    l.stop_at = 2;
    CHECK(box_runs(&src, NULL, &dst, &dst, 4, log_run, &l) == 7);
    CHECK(l.calls == 2);
    /* Second run: source row 1 col 1 = element 5 -> byte 20; destination row 1 = byte 8; 2 elems. */
    CHECK(l.prev_s == 20 && l.prev_d == 8 && l.prev_n == 8);
}

TEST(box_runs_rejects_region_outside) {
    sck_box src = box2(0, 0, 3, 4), dst = box2(0, 0, 2, 4), ov = box2(1, 0, 2, 4);
    run_log l;
    memset(&l, 0, sizeof l);
    CHECK_ERR(box_runs(&src, NULL, &dst, &ov, 4, log_run, &l), SCK_ERR_INVALID_ARG, "not inside");
    CHECK(l.calls == 0);
    int64_t o1[1] = { 0 }, s1[1] = { 2 };
    sck_box one = mkbox(1, o1, s1);
    CHECK_ERR(box_runs(&src, NULL, &one, &one, 4, log_run, &l), SCK_ERR_INVALID_ARG, "not inside");
    CHECK_ERR(box_runs(&src, NULL, &src, &src, 0, log_run, &l), SCK_ERR_INVALID_ARG, "element size");
    CHECK(l.calls == 0);
}

/* ---- box_cover_exact ------------------------------------------------------------------------ */

/* Splits each dim of shape into parts (cut points random) and emits the grid of boxes. */
static size_t grid_boxes(int nd, const int64_t *shape, const int *parts, sck_box *out, uint64_t *x) {
    int64_t cuts[4][9];
    for (int d = 0; d < nd; d++) {
        cuts[d][0] = 0;
        cuts[d][parts[d]] = shape[d];
        /* Steps of 0..2 (0 gives zero-size boxes), clamped to the dim. */
        for (int p = 1; p < parts[d]; p++) {
            cuts[d][p] = cuts[d][p - 1] + rng_below(x, 3);
            if (cuts[d][p] > shape[d]) cuts[d][p] = shape[d];
        }
    }
    size_t n = 0;
    int idx[4] = { 0, 0, 0, 0 };
    for (;;) {
        sck_box b;
        memset(&b, 0, sizeof b);
        b.ndim = nd;
        for (int d = 0; d < nd; d++) { b.off[d] = cuts[d][idx[d]]; b.size[d] = cuts[d][idx[d] + 1] - cuts[d][idx[d]]; }
        out[n++] = b;
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == parts[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    return n;
}

/* Brute force: 1 iff every element is covered exactly once. */
static int brute_cover(int nd, const int64_t *shape, const sck_box *b, size_t n) {
    int64_t total = numel_of(nd, shape);
    int *cnt = calloc((size_t)total + 1, sizeof *cnt);
    if (!cnt) { th_fail(__FILE__, __LINE__, "calloc"); return -1; }
    for (size_t i = 0; i < n; i++) {
        if (!box_within(&b[i], shape)) { free(cnt); return 0; }
        int64_t v = (int64_t)box_numel(&b[i]);
        for (int64_t k = 0; k < v && !box_empty(&b[i]); k++) cnt[flat_of_box_elem(&b[i], shape, k)]++;
    }
    int ok = 1;
    for (int64_t f = 0; f < total; f++) if (cnt[f] != 1) ok = 0;
    free(cnt);
    return ok;
}

TEST(box_cover_grid_tilings) {
    uint64_t x = 31337;
    sck_box boxes[4096];
    for (int rep = 0; rep < 200; rep++) {
        int nd = 1 + (int)rng_below(&x, 4);
        int64_t shape[4];
        int parts[4];
        for (int d = 0; d < nd; d++) { shape[d] = 1 + rng_below(&x, 7); parts[d] = 1 + (int)rng_below(&x, 4); }
        size_t n = grid_boxes(nd, shape, parts, boxes, &x);
        long a = 99, b = 99;
        CHECK(box_cover_exact(nd, shape, boxes, n, &a, &b) == 1);
        CHECK(brute_cover(nd, shape, boxes, n) == 1);
        /* Drop a non-empty box: hole. */
        size_t k = 0;
        while (k < n && box_empty(&boxes[k])) k++;
        REQUIRE(k < n);
        sck_box keep = boxes[k];
        boxes[k] = boxes[n - 1];
        CHECK(box_cover_exact(nd, shape, boxes, n - 1, &a, &b) == 0);
        CHECK(a == -1 && b == -1);
        boxes[k] = keep;
        /* Duplicate a non-empty box: overlap names the two. */
        boxes[n] = boxes[k];
        CHECK(box_cover_exact(nd, shape, boxes, n + 1, &a, &b) == 0);
        CHECK(a == (long)k && b == (long)n);
    }
}

TEST(box_cover_specific_failures) {
    int64_t shape[2] = { 4, 6 };
    sck_box b[4] = { box2(0, 0, 2, 6), box2(2, 0, 2, 3), box2(2, 3, 2, 3), box2(0, 0, 0, 0) };
    long a = 0, c = 0;
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 1);
    CHECK(a == -1 && c == -1);
    /* Zero-size boxes are ignored, even on top of others or at the far edge. */
    b[3] = box2(1, 6, 3, 0);
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 1);
    /* One box grown by one row: overlaps box 0; total volume too big. */
    b[1] = box2(1, 0, 3, 3);
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 0 && c == 1);
    /* Overlap and hole at once with equal volume: overlap is reported. */
    b[1] = box2(1, 0, 2, 3); /* covers rows 1-2, leaves row 3 cols 0-2 empty */
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 0 && c == 1);
    /* Out of bounds. */
    b[1] = box2(2, 0, 3, 3);
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 1 && c == -1);
    b[1] = box2(-1, 0, 2, 3);
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 1 && c == -1);
    /* Zero-size but outside still counts as out of bounds. */
    b[1] = box2(2, 0, 2, 3);
    b[3] = box2(9, 0, 0, 1);
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 3 && c == -1);
    /* Box of the wrong rank. */
    b[3] = box2(0, 0, 0, 0);
    b[3].ndim = 1;
    CHECK(box_cover_exact(2, shape, b, 4, &a, &c) == 0);
    CHECK(a == 3 && c == -1);
    /* NULL outputs are allowed. */
    b[3].ndim = 2;
    CHECK(box_cover_exact(2, shape, b, 3, NULL, NULL) == 1);
    CHECK(box_cover_exact(2, shape, b, 2, NULL, NULL) == 0);
    /* No boxes: a hole, unless the tensor has no elements. */
    CHECK(box_cover_exact(2, shape, NULL, 0, &a, &c) == 0);
    CHECK(a == -1 && c == -1);
    int64_t empty[2] = { 4, 0 };
    CHECK(box_cover_exact(2, empty, NULL, 0, &a, &c) == 1);
    sck_box ez = box2(1, 0, 2, 0);
    CHECK(box_cover_exact(2, empty, &ez, 1, &a, &c) == 1);
    /* Element count beyond 64 bits cannot be checked. */
    int64_t huge[3] = { INT64_MAX, INT64_MAX, 4 };
    sck_box hb[1];
    memset(hb, 0, sizeof hb);
    hb[0].ndim = 3;
    for (int d = 0; d < 3; d++) hb[0].size[d] = huge[d];
    CHECK(box_cover_exact(3, huge, hb, 1, &a, &c) == 0);
    CHECK(a == -1 && c == -1);
}

TEST(box_cover_zero_d) {
    sck_box z[3];
    memset(z, 0, sizeof z);
    long a = 5, b = 5;
    CHECK(box_cover_exact(0, NULL, z, 0, &a, &b) == 0);
    CHECK(a == -1 && b == -1);
    CHECK(box_cover_exact(0, NULL, z, 1, &a, &b) == 1);
    CHECK(a == -1 && b == -1);
    CHECK(box_cover_exact(0, NULL, z, 2, &a, &b) == 0);
    CHECK(a == 0 && b == 1);
    z[2].ndim = 1;
    z[2].size[0] = 1;
    CHECK(box_cover_exact(0, NULL, z, 3, &a, &b) == 0);
    CHECK(a == 2 && b == -1);
}

/* Random partition of [0,numel) across k ranks, each range decomposed into flat pieces. */
static size_t flat_partition_boxes(int nd, const int64_t *shape, int k, sck_box *out, uint64_t *x) {
    int64_t total = numel_of(nd, shape);
    int64_t *cuts = malloc((size_t)(k + 1) * sizeof *cuts);
    if (!cuts) return 0;
    for (int r = 0; r <= k; r++) cuts[r] = rng_below(x, total + 1);
    cuts[0] = 0;
    cuts[k] = total;
    for (int i = 1; i <= k; i++) /* insertion sort: k is small in the random cases */
        for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            int64_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    size_t n = 0;
    for (int r = 0; r < k; r++) {
        int m = box_from_flat(nd, shape, cuts[r], cuts[r + 1] - cuts[r], out + n);
        if (m < 0) { free(cuts); return 0; }
        n += (size_t)m;
    }
    free(cuts);
    return n;
}

TEST(box_cover_flat_partitions) {
    uint64_t x = 2024;
    sck_box boxes[1024];
    for (int rep = 0; rep < 300; rep++) {
        int nd = 1 + (int)rng_below(&x, 4);
        int64_t shape[4];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rng_below(&x, 6);
        int k = 1 + (int)rng_below(&x, 12);
        size_t n = flat_partition_boxes(nd, shape, k, boxes, &x);
        REQUIRE(n > 0);
        long a, b;
        CHECK(box_cover_exact(nd, shape, boxes, n, &a, &b) == 1);
        /* Shift one piece by one element along its innermost dim where possible: overlap or out of
         * bounds, never accepted; and the brute force must agree. */
        size_t i = (size_t)rng_below(&x, (int64_t)n);
        boxes[i].off[nd - 1] += 1;
        int got = box_cover_exact(nd, shape, boxes, n, &a, &b);
        CHECK(got == brute_cover(nd, shape, boxes, n));
        CHECK(got == 0);
        if (a >= 0 && b >= 0) {
            CHECK(a < b);
            CHECK(box_intersect(&boxes[a], &boxes[b], &(sck_box){ 0 }) == 1);
        } else if (a >= 0) {
            CHECK(a == (long)i && b == -1 && !box_within(&boxes[i], shape));
        }
    }
}

TEST(box_cover_random_vs_brute_force) {
    /* Random small box sets: the answer must match brute force, and the reported culprits must be real. */
    uint64_t x = 555;
    int exact = 0;
    for (int rep = 0; rep < 3000; rep++) {
        int nd = 1 + (int)rng_below(&x, 3);
        int64_t shape[3];
        for (int d = 0; d < nd; d++) shape[d] = 1 + rng_below(&x, 4);
        sck_box boxes[8];
        size_t n = 1 + (size_t)rng_below(&x, 8);
        for (size_t i = 0; i < n; i++) {
            boxes[i] = random_box(&x, nd, shape);
            if (rng_below(&x, 10) == 0) boxes[i].size[0] = 0;
            if (rng_below(&x, 30) == 0) boxes[i].off[0] += 1; /* may leave the shape */
        }
        /* Bias toward exact covers: sometimes use a flat partition instead. */
        if (rep % 3 == 0) {
            sck_box fb[1024];
            size_t m = flat_partition_boxes(nd, shape, 1 + (int)rng_below(&x, 3), fb, &x);
            if (m > 0 && m <= 8) { memcpy(boxes, fb, m * sizeof fb[0]); n = m; }
        }
        long a, b;
        int got = box_cover_exact(nd, shape, boxes, n, &a, &b);
        int want = brute_cover(nd, shape, boxes, n);
        CHECK(got == want);
        exact += got;
        if (!got && a >= 0 && b >= 0) {
            sck_box r;
            CHECK(a < b && (size_t)b < n);
            CHECK(box_intersect(&boxes[a], &boxes[b], &r) == 1);
        } else if (!got && a >= 0) {
            CHECK(b == -1 && !box_within(&boxes[a], shape));
        } else if (!got) {
            /* A hole: all inside, pairwise disjoint. */
            for (size_t i = 0; i < n; i++) {
                CHECK(box_within(&boxes[i], shape));
                for (size_t j = i + 1; j < n; j++) { sck_box r; CHECK(!box_intersect(&boxes[i], &boxes[j], &r)); }
            }
        }
    }
    CHECK(exact > 100);
}

TEST(box_cover_many_boxes_performance) {
    /* 20000 column chunks of a [1, 20000] tensor: all share their dim-0 interval, so a sweep that
     * always used dim 0 would compare 2*10^8 pairs. */
    size_t n = 20000;
    sck_box *b = malloc((n + 1) * sizeof *b);
    REQUIRE(b);
    int64_t shape[2] = { 1, (int64_t)n };
    for (size_t i = 0; i < n; i++) b[n - 1 - i] = box2(0, (int64_t)i, 1, 1);
    long a, c;
    CHECK(box_cover_exact(2, shape, b, n, &a, &c) == 1);
    b[n] = box2(0, 7, 1, 2); /* overlaps the chunks at columns 7 and 8 */
    CHECK(box_cover_exact(2, shape, b, n + 1, &a, &c) == 0);
    CHECK(c == (long)n && (a == (long)(n - 1 - 7) || a == (long)(n - 1 - 8)));

    /* 100 x 200 grid of a [1000, 2000] tensor. */
    int64_t gshape[2] = { 1000, 2000 };
    size_t k = 0;
    for (int i = 0; i < 100; i++)
        for (int j = 0; j < 200; j++) b[k++] = box2(i * 10, j * 10, 10, 10);
    CHECK(box_cover_exact(2, gshape, b, k, &a, &c) == 1);
    b[12345].size[1] -= 1;
    CHECK(box_cover_exact(2, gshape, b, k, &a, &c) == 0);
    CHECK(a == -1 && c == -1);
    free(b);

    /* 1000 ranks, flat ranges of a [1, 1, 3, 1000003] tensor decomposed into pieces. */
    int64_t fshape[4] = { 1, 1, 3, 1000003 };
    sck_box *fb = malloc(1000 * 7 * sizeof *fb);
    REQUIRE(fb);
    int64_t total = numel_of(4, fshape), per = total / 1000;
    size_t m = 0;
    for (int r = 0; r < 1000; r++) {
        int64_t lo = r * per, hi = r == 999 ? total : lo + per;
        int got = box_from_flat(4, fshape, lo, hi - lo, fb + m);
        REQUIRE(got > 0 && got <= 7);
        m += (size_t)got;
    }
    CHECK(box_cover_exact(4, fshape, fb, m, &a, &c) == 1);
    free(fb);
}
