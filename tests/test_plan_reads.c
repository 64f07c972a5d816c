/* test_plan_reads.c - a load plans its reads first (ckpt_plan_reads: every box checked, the reads in
 * file order, each with its overlap's size), plans its checks from them, then runs them
 * (ckpt_run_reads); and a load's errors still come in the order of the state's entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "load/ckpt.h"
#include "ckpt_fixture.h"
#include "harness.h"

#define NS 400                /* small tensors [8, 16] f32 (512 B of payload each) */
#define BIGR 512              /* big: [512, 1024] f32 = 2 MiB, one item */

static int save_one(const char *dir, float *small, float *big) {
    sck_state *st = sck_state_new();
    int64_t bs[2] = {BIGR, 1024};
    int rc = st ? sck_state_add_replicated(st, "a.big", SCK_F32, 2, bs, big) : SCK_ERR_NOMEM;
    for (int t = 0; t < NS && !rc; t++) {
        char key[32];
        snprintf(key, sizeof key, "b.small.%03d", t);
        int64_t ss[2] = {8, 16};
        rc = sck_state_add_replicated(st, key, SCK_F32, 2, ss, small + (size_t)t * 128);
    }
    if (!rc) rc = sck_save(NULL, dir, st, NULL);
    sck_state_free(st);
    return rc;
}

TEST(plan_reads_in_file_order_then_run_exactly) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    float *small = malloc((size_t)NS * 128 * 4), *big = malloc((size_t)BIGR * 1024 * 4);
    REQUIRE(small && big);
    th_fill(small, (size_t)NS * 128 * 4, 1);
    th_fill(big, (size_t)BIGR * 1024 * 4, 2);
    REQUIRE_OK(save_one(dir, small, big));
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long eb = sck_ckpt_find(ck, "a.big"), e0 = sck_ckpt_find(ck, "b.small.000");
    REQUIRE(eb >= 0 && e0 >= 0);
    const ck_chunk *cb = &ck->m.e[eb].chunks[0], *c0 = &ck->m.e[e0].chunks[0];
    const ck_chunk *clast = &ck->m.e[e0 + NS - 1].chunks[0];
    REQUIRE(cb->offset < c0->offset && c0->offset < clast->offset); /* big first, then the small ones */
    /* Every tensor whole, in reverse key order: the reads still go in file order. */
    sck_box boxes[NS + 1];
    ck_want w[NS + 1];
    float *out = malloc((size_t)NS * 128 * 4), *bout = malloc((size_t)BIGR * 1024 * 4);
    REQUIRE(out && bout);
    for (int k = 0; k <= NS; k++) {
        size_t ei = (size_t)(k == NS ? eb : e0 + NS - 1 - k);
        memset(&boxes[k], 0, sizeof boxes[k]);
        boxes[k].ndim = 2;
        boxes[k].size[0] = ck->m.e[ei].shape[0];
        boxes[k].size[1] = ck->m.e[ei].shape[1];
        w[k] = (ck_want){ei, &boxes[k], k == NS ? (void *)bout : (void *)(out + (size_t)(NS - 1 - k) * 128)};
    }
    ck_reads r;
    REQUIRE_OK(ckpt_plan_reads(ck, w, NS + 1, &r));
    REQUIRE(r.m == NS + 1);
    /* file order: the big item first, then the small ones by offset; each overlap is its whole chunk */
    CHECK(r.op[0].k == NS && r.op[0].ci == 0 && r.op[0].elems == (uint64_t)BIGR * 1024);
    for (size_t j = 1; j < r.m; j++) {
        CHECK(r.op[j].file == r.op[0].file && r.op[j].off > r.op[j - 1].off);
        CHECK(r.op[j].k == NS - j && r.op[j].elems == 128);
    }
    /* The planned reads are then run, into the wants' buffers, exactly. */
    CHECK_OK(ckpt_run_reads(ck, w, &r));
    CHECK(r.op == NULL && r.m == 0);
    CHECK(!memcmp(out, small, (size_t)NS * 128 * 4));
    CHECK(!memcmp(bout, big, (size_t)BIGR * 1024 * 4));
    /* Part of one tensor: rows 2..5 of b.small.007, its elements counted, read exactly. */
    sck_box part;
    memset(&part, 0, sizeof part);
    part.ndim = 2;
    part.off[0] = 2, part.size[0] = 4, part.size[1] = 16;
    float rows[64];
    ck_want pw = {(size_t)e0 + 7, &part, rows};
    REQUIRE_OK(ckpt_plan_reads(ck, &pw, 1, &r));
    CHECK(r.m == 1 && r.op[0].elems == 64 && r.op[0].k == 0);
    CHECK_OK(ckpt_run_reads(ck, &pw, &r));
    CHECK(!memcmp(rows, small + 7 * 128 + 2 * 16, sizeof rows));
    /* A box that does not fit is refused when planned, and leaves nothing to free. */
    boxes[0].size[0] = 9;
    CHECK_ERR(ckpt_plan_reads(ck, w, NS + 1, &r), SCK_ERR_INVALID_ARG, "does not fit");
    CHECK(r.op == NULL && r.m == 0);
    sck_ckpt_close(ck);
    free(out);
    free(bout);
    free(small);
    free(big);
}

/* A failing bytes entry before a tensor that does not match: the bytes entry's error is the load's,
 * as entries are taken in state order; the other way round, the mismatch is. */
TEST(plan_reads_load_errors_keep_state_order) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    float t[64];
    th_fill(t, sizeof t, 3);
    sck_state *st = sck_state_new();
    int64_t shape[1] = {64};
    REQUIRE_OK(sck_state_add_blob(st, "a.blob", "0123456789abcdef", 16));
    REQUIRE_OK(sck_state_add_replicated(st, "b.t", SCK_F32, 1, shape, t));
    REQUIRE_OK(sck_save(NULL, dir, st, NULL));
    sck_state_free(st);
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_chunk_info ci;
    REQUIRE_OK(sck_ckpt_chunk(ck, (size_t)sck_ckpt_find(ck, "a.blob"), 0, &ci));
    char file[256];
    snprintf(file, sizeof file, "%s", ci.file);
    uint64_t at = ci.offset + ci.length - 3;
    sck_ckpt_close(ck);
    REQUIRE(fx_flip(dir, file, at, 0x10) == 0);
    /* blob first (damaged), then a tensor with the wrong dtype: the checksum error wins */
    int32_t wrong[64];
    sck_state *a = sck_state_new();
    REQUIRE_OK(sck_state_add_blob(a, "a.blob", NULL, 0));
    REQUIRE_OK(sck_state_add_replicated(a, "b.t", SCK_I32, 1, shape, wrong));
    CHECK_ERR(sck_load(NULL, dir, a, NULL), SCK_ERR_CHECKSUM, "'a.blob'");
    sck_state_free(a);
    /* the same two the other way round (keys sorted differently in the state) */
    sck_state *b = sck_state_new();
    REQUIRE_OK(sck_state_add_replicated(b, "b.t", SCK_I32, 1, shape, wrong));
    REQUIRE_OK(sck_state_add_blob(b, "a.blob", NULL, 0));
    CHECK_ERR(sck_load(NULL, dir, b, NULL), SCK_ERR_MISMATCH, "'b.t'");
    sck_state_free(b);
    REQUIRE(fx_flip(dir, file, at, 0x10) == 0);
    /* undamaged: both load */
    float back[64];
    sck_state *c = sck_state_new();
    REQUIRE_OK(sck_state_add_blob(c, "a.blob", NULL, 0));
    REQUIRE_OK(sck_state_add_replicated(c, "b.t", SCK_F32, 1, shape, back));
    CHECK_OK(sck_load(NULL, dir, c, NULL));
    CHECK(!memcmp(back, t, sizeof t));
    sck_state_free(c);
}

/* ---- reading order of a reshard: distributed by file in one pass, or sorted ---- */

#define RT 24 /* tensors [12, 8] f32, saved as 4 row blocks of 3 rows by 4 thread ranks */

static int save_rows(sck_comm *c, void *arg) {
    float *data = arg;
    int r = sck_comm_rank(c);
    sck_state *st = sck_state_new();
    int rc = st ? SCK_OK : SCK_ERR_NOMEM;
    for (int t = 0; t < RT && !rc; t++) {
        char key[32];
        snprintf(key, sizeof key, "t.%02d", t);
        int64_t shape[2] = {12, 8}, off[2] = {3 * r, 0}, size[2] = {3, 8};
        rc = sck_state_add_box(st, key, SCK_F32, 2, shape, off, size, data + (size_t)t * 96 + (size_t)r * 24);
    }
    if (!rc) rc = sck_save(c, (const char *)(data + RT * 96), st, NULL);
    sck_state_free(st);
    return rc;
}

static int cmp_op_ref(const void *a, const void *b) {
    const read_op *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* Rows [5, 9) of every tensor (chunks 1 and 2 of each, in two files), each wanted twice in a row (ties:
 * the same item for two wants), in key order (file order within each file: distributed) or reversed
 * (sorted), planned as rank r of 3: the reads are those of a sort by (file, offset, want), rotated to
 * start at the rank's share of the files, whichever path ordered them; then they load exactly. */
TEST(plan_reads_reshard_order_is_sorted_and_staggered) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    float *data = malloc((size_t)RT * 96 * 4 + sizeof dir);
    REQUIRE(data);
    th_fill(data, (size_t)RT * 96 * 4, 5);
    memcpy(data + RT * 96, dir, sizeof dir); /* the directory travels behind the data */
    REQUIRE_OK(sck_threads_run(4, save_rows, data));
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    REQUIRE(ck->m.nfiles == 4);
    sck_box box;
    memset(&box, 0, sizeof box);
    box.ndim = 2;
    box.off[0] = 5, box.size[0] = 4, box.size[1] = 8;
    float out[2 * RT][32];
    ck_want w[2 * RT];
    for (int reversed = 0; reversed < 2; reversed++) {
        for (int rank = 0; rank < 3; rank++) {
            for (int k = 0; k < 2 * RT; k++) {
                int t = reversed ? RT - 1 - k / 2 : k / 2;
                char key[32];
                snprintf(key, sizeof key, "t.%02d", t);
                long ei = sck_ckpt_find(ck, key);
                REQUIRE(ei >= 0);
                w[k] = (ck_want){(size_t)ei, &box, out[k]};
            }
            ck->rank = rank, ck->nranks = 3;
            ck_reads r;
            REQUIRE_OK(ckpt_plan_reads(ck, w, 2 * RT, &r));
            REQUIRE(r.m == 4 * RT);
            read_op ref[4 * RT];
            memcpy(ref, r.op, sizeof ref);
            qsort(ref, r.m, sizeof *ref, cmp_op_ref);
            size_t j = 0;
            double target = 4.0 * rank / 3;
            while (rank && j < r.m && ckpt_file_pos(ck->m.file_end, ref[j].file, ref[j].off) < target) j++;
            if (j == r.m) j = 0;
            int same = 1;
            for (size_t i = 0; i < r.m; i++) {
                const read_op *a = &r.op[i], *b = &ref[(i + j) % r.m];
                same &= a->file == b->file && a->off == b->off && a->k == b->k && a->ci == b->ci;
            }
            CHECK(same);
            CHECK(rank == 0 || j > 0); /* ranks 1 and 2 start inside the files */
            memset(out, 0, sizeof out);
            CHECK_OK(ckpt_run_reads(ck, w, &r));
            int exact = 1;
            for (int k = 0; k < 2 * RT; k++) {
                int t = reversed ? RT - 1 - k / 2 : k / 2;
                exact &= !memcmp(out[k], data + (size_t)t * 96 + 5 * 8, sizeof out[k]);
            }
            CHECK(exact);
        }
    }
    sck_ckpt_close(ck);
    free(data);
}
