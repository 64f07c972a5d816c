/* test_plan.c - the save plan (src/core/plan.c) against a simple reference planner: the same model, the
 * same items per rank, byte-identical `.metadata`, and the same errors, for random states over 1 to 8
 * ranks; a plan built for one rank keeps exactly that rank's items; corrupt plans are refused. */
#include <stdlib.h>

#include "harness.h"
#include "core/plan.h"

/* ---- the reference: every rank's entries sorted by (key, rank), merged key by key ---- */

typedef struct rent {
    const char *key;
    int rank;
    const st_entry *e;
    size_t idx;
} rent;

static int cmp_rent(const void *a, const void *b) {
    const rent *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

typedef struct ref_plan {
    ck_meta m;
    plan_item *items[16];
    size_t nitems[16];
} ref_plan;

static void ref_free(ref_plan *p) {
    ck_meta_free(&p->m);
    for (int r = 0; r < 16; r++) free(p->items[r]);
    memset(p, 0, sizeof *p);
}

static int ref_item(ref_plan *p, int rank, size_t entry, size_t chunk, size_t le, size_t piece) {
    plan_item *it = realloc(p->items[rank], (p->nitems[rank] + 1) * sizeof *it);
    if (!it) return SCK_ERR_NOMEM;
    p->items[rank] = it;
    it[p->nitems[rank]++] = (plan_item){entry, chunk, le, piece};
    return SCK_OK;
}

static const char *kname(int k) { return k == ENT_TENSOR ? "tensor" : k == ENT_BLOB ? "blob" : "value"; }

static int ref_merge(ref_plan *p, const rent *g, size_t ng, uint64_t *load) {
    const st_entry *f = g[0].e;
    for (size_t i = 1; i < ng; i++) {
        const st_entry *x = g[i].e;
        if (x->kind != f->kind)
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d saves a %s, rank %d a %s", f->key, g[0].rank, kname((int)f->kind),
                           g[i].rank, kname((int)x->kind));
        if (f->kind == ENT_TENSOR && (x->dtype != f->dtype || x->ndim != f->ndim || memcmp(x->shape, f->shape, (size_t)f->ndim * 8)))
            return sck_err(SCK_ERR_MISMATCH, "'%s': rank %d and rank %d disagree on dtype or global shape", f->key, g[0].rank, g[i].rank);
        if (f->kind == ENT_TENSOR && x->replicated != f->replicated)
            return sck_err(SCK_ERR_MISMATCH, "'%s': replicated on rank %d but sharded on rank %d", f->key,
                           f->replicated ? g[0].rank : g[i].rank, f->replicated ? g[i].rank : g[0].rank);
    }
    ck_entry *e;
    int rc = ck_meta_add(&p->m, f->key, &e);
    if (rc) return rc;
    size_t ei = p->m.n - 1;
    ck_chunk c;
    memset(&c, 0, sizeof c);
    if (f->kind != ENT_TENSOR) {
        e->is_bytes = 1;
        const rent *w = NULL;
        for (size_t i = 0; i < ng && !w; i++)
            if (g[i].e->present) w = &g[i];
        if (!w) return sck_err(SCK_ERR_INVALID_ARG, "'%s': no rank supplied data for this %s", f->key, kname((int)f->kind));
        c.file = (uint32_t)w->rank;
        load[w->rank] += 1;
        return ck_entry_add_chunk(e, &c, NULL, NULL) || ref_item(p, w->rank, ei, 0, w->idx, 0);
    }
    e->dtype = f->dtype;
    e->ndim = f->ndim;
    memcpy(e->shape, f->shape, sizeof e->shape);
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", sck_dtype_name(f->dtype));
    uint64_t numel = 0;
    sck_numel(f->ndim, f->shape, &numel);
    if (f->replicated) {
        if (numel == 0) return SCK_OK;
        const rent *w = &g[0];
        for (size_t i = 1; i < ng; i++)
            if (load[g[i].rank] < load[w->rank]) w = &g[i];
        static const int64_t zeros[SCK_MAX_DIMS];
        c.file = (uint32_t)w->rank;
        load[w->rank] += numel * sck_dtype_size(f->dtype);
        return ck_entry_add_chunk(e, &c, zeros, f->shape) || ref_item(p, w->rank, ei, 0, w->idx, 0);
    }
    sck_box boxes[64];
    int owner[64];
    size_t n = 0;
    for (size_t i = 0; i < ng; i++)
        for (size_t j = 0; j < g[i].e->npieces && n < 64; j++, n++) boxes[n] = g[i].e->pieces[j].box, owner[n] = g[i].rank;
    long ba, bb;
    if (!box_cover_exact(f->ndim, f->shape, boxes, n, &ba, &bb)) {
        if (ba >= 0 && bb >= 0)
            return sck_err(SCK_ERR_COVERAGE, "'%s': shards overlap (a box of rank %d and a box of rank %d)", f->key, owner[ba], owner[bb]);
        if (ba >= 0) return sck_err(SCK_ERR_COVERAGE, "'%s': a box of rank %d lies outside the tensor", f->key, owner[ba]);
        return sck_err(SCK_ERR_COVERAGE, "'%s': the shards of all ranks do not cover the whole tensor", f->key);
    }
    size_t k = 0;
    for (size_t i = 0; i < ng; i++) {
        for (size_t j = 0; j < g[i].e->npieces; j++, k++) {
            c.file = (uint32_t)owner[k];
            if (ck_entry_add_chunk(e, &c, boxes[k].off, boxes[k].size) || ref_item(p, owner[k], ei, k, g[i].idx, j)) return SCK_ERR_NOMEM;
            load[owner[k]] += box_numel(&boxes[k]) * sck_dtype_size(f->dtype);
        }
    }
    return SCK_OK;
}

static int ref_build(sck_state **st, int R, ref_plan *p) {
    memset(p, 0, sizeof *p);
    size_t n = 0;
    for (int r = 0; r < R; r++) n += st[r]->n;
    rent *all = calloc(n + 1, sizeof *all);
    uint64_t load[16] = {0};
    if (!all) return SCK_ERR_NOMEM;
    n = 0;
    for (int r = 0; r < R; r++)
        for (size_t i = 0; i < st[r]->n; i++) all[n++] = (rent){st[r]->e[i].key, r, &st[r]->e[i], i};
    qsort(all, n, sizeof *all, cmp_rent);
    int rc = SCK_OK;
    for (int r = 0; r < R && !rc; r++) {
        char name[32];
        uint32_t idx;
        snprintf(name, sizeof name, "__%d_0.distcp", r);
        rc = ck_meta_file(&p->m, name, &idx);
    }
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i + 1;
        while (j < n && !strcmp(all[j].key, all[i].key)) j++;
        rc = ref_merge(p, &all[i], j - i, load);
        i = j;
    }
    free(all);
    return rc;
}

/* ---- encoding every rank's state and building the plan under test ---- */

/* Each rank's plan follows a header of HDR bytes, as in a save's first collective (its record). */
#define HDR 7
static int build_under_test(sck_state **st, int R, int only, save_plan *p) {
    sck_buf all;
    sck_buf_init(&all);
    size_t counts[16];
    int rc = SCK_OK;
    for (int r = 0; r < R && !rc; r++) {
        size_t before = all.len;
        rc = sck_buf_append(&all, "header!", HDR);
        if (!rc) rc = plan_encode_local(st[r], 0, &all);
        counts[r] = all.len - before;
    }
    if (!rc) rc = plan_build_ex(all.data, counts, HDR, R, only, p);
    sck_buf_free(&all);
    return rc;
}

/* Same offsets, lengths and checksums in both models, so their `.metadata` can be compared. */
static void fake_storage(ck_meta *m) {
    for (size_t i = 0; i < m->n; i++)
        for (size_t c = 0; c < m->e[i].nchunks; c++) {
            ck_chunk *ch = &m->e[i].chunks[c];
            ch->offset = i * 4096 + c;
            ch->length = 100 + c;
            ch->crc32c = (uint32_t)(i * 31 + c);
            ch->has_crc = 1;
        }
}

static int same_items(const plan_item *a, size_t na, const plan_item *b, size_t nb) {
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i].entry != b[i].entry || a[i].chunk != b[i].chunk || a[i].local_entry != b[i].local_entry ||
            a[i].local_piece != b[i].local_piece)
            return 0;
    return 1;
}

/* Builds both plans (and one per rank), checks they agree; returns the status (both must agree on it). */
static int compare_plans(sck_state **st, int R) {
    ref_plan ref;
    int rr = ref_build(st, R, &ref);
    char ref_msg[1024];
    snprintf(ref_msg, sizeof ref_msg, "%s", sck_last_error());
    save_plan p;
    int rp = build_under_test(st, R, -1, &p);
    CHECK(rp == rr);
    if (rp || rr) {
        CHECK(!strcmp(sck_last_error(), ref_msg));
        if (strcmp(sck_last_error(), ref_msg)) fprintf(stderr, "  plan: %s\n  reference: %s\n", sck_last_error(), ref_msg);
        for (int r = 0; r < R; r++) { /* built for one rank: the same error */
            save_plan q;
            CHECK(build_under_test(st, R, r, &q) == rp);
            CHECK(!strcmp(sck_last_error(), ref_msg));
        }
        if (!rp) plan_free(&p);
        ref_free(&ref);
        return rp ? rp : rr;
    }
    CHECK(p.m.n == ref.m.n);
    CHECK(p.m.nfiles == ref.m.nfiles);
    for (size_t i = 0; i < p.m.n && i < ref.m.n; i++) {
        const ck_entry *a = &p.m.e[i], *b = &ref.m.e[i];
        CHECK(!strcmp(a->key, b->key));
        CHECK(a->is_bytes == b->is_bytes && a->dtype == b->dtype && a->ndim == b->ndim && !strcmp(a->dtype_name, b->dtype_name));
        CHECK(!memcmp(a->shape, b->shape, sizeof a->shape));
        CHECK(a->nchunks == b->nchunks);
        for (size_t c = 0; c < a->nchunks && c < b->nchunks; c++) {
            CHECK(a->chunks[c].file == b->chunks[c].file);
            sck_box x, y;
            ck_chunk_box(a, c, &x);
            ck_chunk_box(b, c, &y);
            CHECK(box_equal(&x, &y));
        }
    }
    for (int r = 0; r < R; r++) {
        CHECK(same_items(p.items[r], p.nitems[r], ref.items[r], ref.nitems[r]));
        save_plan q;
        CHECK_OK(build_under_test(st, R, r, &q));
        CHECK(q.m.n == 0);
        CHECK(same_items(q.items[r], q.nitems[r], ref.items[r], ref.nitems[r]));
        for (int o = 0; o < R; o++) CHECK(o == r || q.nitems[o] == 0);
        plan_free(&q);
    }
    fake_storage(&p.m);
    fake_storage(&ref.m);
    sck_buf a, b;
    sck_buf_init(&a);
    sck_buf_init(&b);
    CHECK_OK(dcp_meta_encode(&p.m, &a));
    CHECK_OK(dcp_meta_encode(&ref.m, &b));
    CHECK(a.len == b.len && !memcmp(a.data, b.data, a.len));
    sck_buf_free(&a);
    sck_buf_free(&b);
    plan_free(&p);
    ref_free(&ref);
    return SCK_OK;
}

/* ---- random states ---- */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static uint8_t g_data[1 << 16];

/* Random cut points: cuts[0] = 0 <= ... <= cuts[R] = n. */
static void cuts(uint64_t *s, int64_t n, int R, int64_t *c) {
    c[0] = 0;
    c[R] = n;
    for (int r = 1; r < R; r++) c[r] = (int64_t)(rnd(s) % (uint64_t)(n + 1));
    for (int i = 1; i < R; i++) /* sort */
        for (int j = i; j > 1 && c[j] < c[j - 1]; j--) {
            int64_t t = c[j];
            c[j] = c[j - 1], c[j - 1] = t;
        }
}

/* Adds key k (kind chosen from the seed, identically on every rank) to rank r's state. */
static void add_key(sck_state *st, uint64_t kseed, const char *key, int r, int R) {
    uint64_t s = kseed;
    int kind = (int)(rnd(&s) % 8);
    int64_t sh[2] = {(int64_t)(rnd(&s) % 9) + 1, (int64_t)(rnd(&s) % 5) + 1}, c[17];
    sck_dtype dt = (sck_dtype)(rnd(&s) % 3 ? SCK_F32 : SCK_BF16);
    unsigned holders = ((unsigned)rnd(&s) & ((1u << R) - 1)) | (1u << (rnd(&s) % (unsigned)R)), present = (unsigned)rnd(&s) & holders;
    if (!present) present = holders & (~holders + 1); /* the lowest holder */
    int mine = (holders >> r) & 1;
    switch (kind) {
    case 0: /* row blocks at random cuts (some empty) */
    case 1: {
        cuts(&s, sh[0], R, c);
        int64_t off[2] = {c[r], 0}, sz[2] = {c[r + 1] - c[r], sh[1]};
        sck_state_add_box(st, key, dt, 2, sh, off, sz, g_data);
        break;
    }
    case 2: { /* 2x2 blocks to random ranks: several pieces per rank, not in row order */
        int64_t h = sh[0] / 2, w = sh[1] / 2;
        int owner[4];
        for (int q = 0; q < 4; q++) owner[q] = (int)(rnd(&s) % (unsigned)R);
        for (int q = 3; q >= 0; q--) {
            if (owner[q] != r) continue;
            int64_t off[2] = {q / 2 ? h : 0, q % 2 ? w : 0}, sz[2] = {q / 2 ? sh[0] - h : h, q % 2 ? sh[1] - w : w};
            sck_state_add_box(st, key, dt, 2, sh, off, sz, g_data);
        }
        if (owner[0] != r && owner[1] != r && owner[2] != r && owner[3] != r) { /* the entry, no data */
            int64_t z[2] = {0, 0};
            sck_state_add_box(st, key, dt, 2, sh, z, z, NULL);
        }
        break;
    }
    case 3: { /* flat ranges: up to three boxes each */
        cuts(&s, sh[0] * sh[1], R, c);
        sck_state_add_flat(st, key, dt, 2, sh, c[r], c[r + 1] - c[r], g_data);
        break;
    }
    case 4: /* replicated on some ranks (sometimes empty) */
        if (rnd(&s) % 4 == 0) sh[1] = 0;
        if (mine) sck_state_add_replicated(st, key, dt, 2, sh, g_data);
        break;
    case 5:
        if (mine) sck_state_add_blob(st, key, (present >> r) & 1 ? (const void *)g_data : NULL, (present >> r) & 1 ? 3 : 0);
        break;
    case 6:
        if (mine) sck_state_add_value(st, key, (present >> r) & 1 ? sck_value_int(r) : NULL);
        break;
    default: { /* a 0-d tensor or a whole 1-d tensor on the lowest holder only */
        int w = 0;
        while (!((holders >> w) & 1)) w++;
        int64_t one[1] = {sh[0]}, z[1] = {0};
        if (r == w && sh[1] % 2) sck_state_add_box(st, key, dt, 0, one, z, z, g_data);
        else if (r == w) sck_state_add_box(st, key, dt, 1, one, z, one, g_data);
        break;
    }
    }
}

static sck_state **random_states(uint64_t seed, int R, int nkeys) {
    static const char *pre[] = {"model.layers.", "model.layers.1", "model.", "optim.state.", "a"};
    sck_state **st = calloc((size_t)R, sizeof *st);
    int *perm = malloc((size_t)nkeys * sizeof *perm);
    for (int r = 0; r < R; r++) {
        st[r] = sck_state_new();
        uint64_t s = seed * 977 + (uint64_t)r + 1;
        for (int k = 0; k < nkeys; k++) perm[k] = k;
        for (int k = nkeys - 1; k > 0 && r % 2; k--) { /* odd ranks insert in a random order */
            int j = (int)(rnd(&s) % (uint64_t)(k + 1)), t = perm[k];
            perm[k] = perm[j], perm[j] = t;
        }
        for (int k = 0; k < nkeys; k++) {
            char key[64];
            snprintf(key, sizeof key, "%s%d.w%s", pre[perm[k] % 5], perm[k], perm[k] % 3 ? "" : "eight");
            add_key(st[r], seed * 1000003 + (uint64_t)perm[k] * 7919 + 1, key, r, R);
        }
    }
    free(perm);
    return st;
}

static void free_states(sck_state **st, int R) {
    for (int r = 0; r < R; r++) sck_state_free(st[r]);
    free(st);
}

TEST(plan_matches_the_reference_planner_on_random_states) {
    static const int ranks[] = {1, 2, 3, 5, 8};
    int ok = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        int R = ranks[seed % 5];
        sck_state **st = random_states(seed, R, 3 + (int)(seed * 7 % 40));
        int rc = compare_plans(st, R);
        if (rc == SCK_OK) ok++;
        else if (getenv("PLAN_TEST_VERBOSE")) fprintf(stderr, "  seed %d: %s\n", (int)seed, sck_last_error());
        free_states(st, R);
    }
    CHECK(ok > 20); /* most random states are valid; the rest must fail identically */
}

/* Every tensor split the same way over the ranks (the benchmark's layout): records compress to a few
 * bytes and the plan matches. */
TEST(plan_of_a_uniform_split_is_compact_and_matches) {
    enum { R = 4, N = 500 };
    sck_state *st[R];
    for (int r = 0; r < R; r++) {
        st[r] = sck_state_new();
        for (int t = 0; t < N; t++) {
            char key[32];
            snprintf(key, sizeof key, "model.t%05d", t);
            int64_t sh[2] = {64, 16}, off[2] = {16 * r, 0}, sz[2] = {16, 16};
            REQUIRE_OK(sck_state_add_box(st[r], key, SCK_F32, 2, sh, off, sz, g_data));
        }
    }
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(plan_encode_local(st[1], 0, &b));
    CHECK(b.len < 6 * N); /* flags, shared-prefix length, suffix length, 1-2 suffix bytes */
    sck_buf_free(&b);
    CHECK_OK(compare_plans(st, R));
    save_plan p;
    REQUIRE_OK(build_under_test(st, R, -1, &p));
    CHECK(p.m.n == N && p.nitems[3] == N);
    CHECK(p.m.e[7].nchunks == R && ck_chunk_off(&p.m.e[7], 2)[0] == 32 && p.m.e[7].chunks[2].file == 2);
    CHECK(p.items[2][7].entry == 7 && p.items[2][7].chunk == 2 && p.items[2][7].local_entry == 7);
    plan_free(&p);
    for (int r = 0; r < R; r++) sck_state_free(st[r]);
}

TEST(plan_errors_match_the_reference) {
    static const struct {
        int kind;
        int status;
        const char *msg;
    } cases[] = {
        {0, SCK_ERR_MISMATCH, "'w': rank 0 and rank 1 disagree on dtype or global shape"},
        {1, SCK_ERR_MISMATCH, "'w': rank 0 saves a tensor, rank 1 a blob"},
        {2, SCK_ERR_MISMATCH, "'w': replicated on rank 1 but sharded on rank 0"},
        {3, SCK_ERR_COVERAGE, "'w': shards overlap (a box of rank 0 and a box of rank 1)"},
        {4, SCK_ERR_COVERAGE, "'w': the shards of all ranks do not cover the whole tensor"},
        {5, SCK_ERR_INVALID_ARG, "'w': no rank supplied data for this blob"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sck_state *st[2] = {sck_state_new(), sck_state_new()};
        int64_t sh[2] = {4, 4};
        for (int r = 0; r < 2; r++) {
            sck_state_add_replicated(st[r], "a.before", SCK_F32, 2, sh, g_data);
            sck_state_add_blob(st[r], "z.after", g_data, 1);
            int64_t off[2] = {2 * r, 0}, sz[2] = {2, 4};
            if (cases[c].kind == 3 && r == 1) off[0] = 1;
            if (cases[c].kind == 4) sz[0] = 1;
            if (cases[c].kind == 5) sck_state_add_blob(st[r], "w", NULL, 0);
            else if (cases[c].kind == 1 && r == 1) sck_state_add_blob(st[r], "w", g_data, 1);
            else if (cases[c].kind == 2 && r == 1) sck_state_add_replicated(st[r], "w", SCK_F32, 2, sh, g_data);
            else sck_state_add_box(st[r], "w", cases[c].kind == 0 && r == 1 ? SCK_F64 : SCK_F32, 2, sh, off, sz, g_data);
        }
        CHECK(compare_plans(st, 2) == cases[c].status);
        save_plan p;
        CHECK(build_under_test(st, 2, 1, &p) == cases[c].status);
        CHECK(strstr(sck_last_error(), cases[c].msg) != NULL);
        for (int r = 0; r < 2; r++) sck_state_free(st[r]);
    }
}

/* Truncated or flipped plans from a peer: refused (or, if still well-formed, planned), never a crash. */
TEST(plan_refuses_corrupt_plans) {
    enum { R = 3 };
    sck_state **st = random_states(7, R, 30);
    sck_buf b[R];
    size_t counts[R];
    for (int r = 0; r < R; r++) {
        sck_buf_init(&b[r]);
        REQUIRE_OK(plan_encode_local(st[r], 0, &b[r]));
    }
    uint64_t s = 99;
    int refused = 0;
    for (int it = 0; it < 3000; it++) {
        sck_buf all;
        sck_buf_init(&all);
        int victim = (int)(rnd(&s) % R);
        for (int r = 0; r < R; r++) {
            size_t n = b[r].len;
            if (r == victim && it % 3 == 0) n = (size_t)(rnd(&s) % n); /* truncated */
            size_t at = all.len;
            REQUIRE_OK(sck_buf_append(&all, b[r].data, n));
            if (r == victim && it % 3) all.data[at + rnd(&s) % n] ^= (uint8_t)(1u << (rnd(&s) % 8));
            counts[r] = n;
        }
        save_plan p;
        int rc = plan_build_ex(all.data, counts, 0, R, it % 4 == 3 ? -1 : (int)(it % 4), &p);
        if (rc) refused++;
        else plan_free(&p);
        CHECK(rc == SCK_OK || rc == SCK_ERR_FORMAT || rc == SCK_ERR_MISMATCH || rc == SCK_ERR_COVERAGE ||
              rc == SCK_ERR_INVALID_ARG);
        sck_buf_free(&all);
    }
    CHECK(refused > 2000);
    size_t zero[R] = {0};
    save_plan p;
    CHECK_ERR(plan_build_ex(b[0].data, zero, 0, R, -1, &p), SCK_ERR_FORMAT, "save plan from rank 0 is corrupt");
    size_t lens[R];
    for (int r = 0; r < R; r++) lens[r] = r == 1 ? 2 : 5;
    CHECK_ERR(plan_build_ex(b[0].data, lens, 3, R, -1, &p), SCK_ERR_FORMAT, "rank 1's save plan: 2 bytes, shorter than its 3-byte header");
    for (int r = 0; r < R; r++) sck_buf_free(&b[r]);
    free_states(st, R);
}
