/* test_load_checkers.c - resharded loads let one rank check each item (src/load/load_checks.h): the owner
 * reads and checks the item whole, the other readers read only their runs (counted in bytes with the
 * kernel's per-thread read accounting), and a flipped byte in any item any rank read still fails the
 * load on every rank, while items nobody read are not checked. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "load/load_checks.h"

#define WR 1920               /* w: [1920, 1024] f32, saved as 2 row blocks of 960 rows (3.75 MiB) */
#define WC 1024
#define VR 64                 /* v: [64, 1024] f32, 2 row blocks of 128 KiB (small items) */
#define ROW ((uint64_t)WC * 4)
#define HEAD (64u << 10)      /* src/load/ckpt_read.h HEAD_BYTES: a large item's headers are read 64 KiB at each end */

typedef struct job {
    const char *dir;
    float *w, *v;             /* the global tensors */
    int by_cols;              /* load column blocks instead of row blocks (2: columns col_lo..col_hi per rank) */
    int64_t col_lo[8], col_hi[8];
    int replicated;           /* every rank loads all rows lo..hi */
    int64_t lo, hi;           /* rows of w loaded (split among the ranks) */
    int with_v;               /* also load v (split by rows) */
    int absent;               /* also request a key the checkpoint lacks (with SCK_LOAD_ALLOW_MISSING) */
    unsigned flags[8];        /* per-rank load flags */
    int rcs[8];
    char msgs[8][512];
    int bad[8];               /* elements that differ from the global tensors */
    uint64_t rchar[8];        /* bytes each rank's thread read during sck_load */
    int garble_rank;          /* rank+1 whose allgather contributions longer than garble_min bytes end in a cut varint */
    size_t garble_min;
    int count_gathers;        /* load through the garbling communicator (off) to fill most[] */
    size_t most[8];           /* per rank: its longest allgather contribution during sck_load */
    int calls[8];             /* per rank: the collectives (allgathers, broadcasts, barriers) of its sck_load */
} job;

/* The kernel's count of bytes this thread (self = 0) or process (self = 1) has read, less the bytes of
 * the read that returns it, which *extra receives (a later count includes them). */
static uint64_t rchar(int proc, uint64_t *extra) {
    char buf[1024];
    int fd = open(proc ? "/proc/self/io" : "/proc/thread-self/io", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    *extra = (uint64_t)n;
    const char *p = strstr(buf, "rchar:");
    return p ? strtoull(p + 6, NULL, 10) : 0;
}

static int save_rank(sck_comm *c, void *arg) {
    job *g = arg;
    int r = sck_comm_rank(c);
    sck_state *st = sck_state_new();
    int64_t ws[2] = {WR, WC}, wo[2] = {r * WR / 2, 0}, wz[2] = {WR / 2, WC};
    int64_t vs[2] = {VR, WC}, vo[2] = {r * VR / 2, 0}, vz[2] = {VR / 2, WC};
    int rc = sck_state_add_box(st, "w", SCK_F32, 2, ws, wo, wz, g->w + (size_t)r * WR / 2 * WC);
    if (!rc) rc = sck_state_add_box(st, "v", SCK_F32, 2, vs, vo, vz, g->v + (size_t)r * VR / 2 * WC);
    if (!rc) rc = sck_save(c, g->dir, st, NULL);
    sck_state_free(st);
    return rc;
}

/* A communicator passing everything to `inner`, except that a garbling rank's allgather contributions
 * longer than `min` bytes (8: the status record; the lists of files and items each rank reads follow
 * it, src/load/load_checks.c) reach the others with the high bit of their last byte set: a varint cut
 * short, or a file the checkpoint does not have. */
typedef struct garble {
    sck_comm *inner;
    int on;
    size_t min;
    size_t *most;           /* if not NULL: the longest contribution of this rank so far */
    int *calls;             /* if not NULL: counts this rank's collectives */
} garble;
static void gb_count(garble *gb) {
    if (gb->calls) ++*gb->calls;
}
static int gb_allgatherv(void *ctx, const void *send, size_t n, void **recv, size_t *counts) {
    garble *gb = ctx;
    gb_count(gb);
    if (gb->most && n > *gb->most) *gb->most = n;
    if (!gb->on || n <= gb->min) return gb->inner->ops->allgatherv(gb->inner->ctx, send, n, recv, counts);
    unsigned char *copy = malloc(n);
    if (!copy) return SCK_ERR_NOMEM;
    memcpy(copy, send, n);
    copy[n - 1] |= 0x80;
    int rc = gb->inner->ops->allgatherv(gb->inner->ctx, copy, n, recv, counts);
    free(copy);
    return rc;
}
static int gb_bcast(void *ctx, void **buf, size_t *n, int root) {
    garble *gb = ctx;
    gb_count(gb);
    return gb->inner->ops->bcast(gb->inner->ctx, buf, n, root);
}
static int gb_barrier(void *ctx) {
    garble *gb = ctx;
    gb_count(gb);
    return gb->inner->ops->barrier(gb->inner->ctx);
}
static const sck_comm_ops garble_ops = {gb_allgatherv, gb_bcast, gb_barrier, NULL};

static int load_rank(sck_comm *c, void *arg) {
    job *g = arg;
    int r = sck_comm_rank(c), n = sck_comm_size(c);
    int64_t ws[2] = {WR, WC}, wo[2], wz[2];
    if (g->by_cols == 2) wo[0] = 0, wo[1] = g->col_lo[r], wz[0] = WR, wz[1] = g->col_hi[r] - g->col_lo[r];
    else if (g->by_cols) wo[0] = 0, wo[1] = WC * r / n, wz[0] = WR, wz[1] = WC * (r + 1) / n - wo[1];
    else if (g->replicated) wo[0] = g->lo, wo[1] = 0, wz[0] = g->hi - g->lo, wz[1] = WC;
    else wo[0] = g->lo + (g->hi - g->lo) * r / n, wo[1] = 0, wz[0] = g->lo + (g->hi - g->lo) * (r + 1) / n - wo[0], wz[1] = WC;
    int64_t vs[2] = {VR, WC}, vo[2] = {VR * r / n, 0}, vz[2] = {VR * (r + 1) / n - VR * r / n, WC};
    float *wb = calloc((size_t)(wz[0] * wz[1]) + 1, 4), *vb = calloc((size_t)(vz[0] * vz[1]) + 1, 4), dummy[4];
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "w", SCK_F32, 2, ws, wo, wz, wb);
    if (!rc && g->with_v) rc = sck_state_add_box(st, "v", SCK_F32, 2, vs, vo, vz, vb);
    int64_t as[1] = {4};
    if (!rc && g->absent) rc = sck_state_add_replicated(st, "absent", SCK_F32, 1, as, dummy);
    sck_load_opts lo = {g->flags[r], {0}, 0};
    uint64_t extra = 0, before = rchar(0, &extra);
    g->most[r] = 0;
    g->calls[r] = 0;
    garble gb = {c, g->garble_rank == r + 1, g->garble_min, &g->most[r], &g->calls[r]};
    sck_comm *gc = g->garble_rank || g->count_gathers ? sck_comm_create(&garble_ops, &gb, r, n) : NULL;
    if (!rc) rc = sck_load(gc ? gc : c, g->dir, st, &lo);
    sck_comm_free(gc);
    uint64_t ignore;
    g->rchar[r] = rchar(0, &ignore) - before - extra;
    g->rcs[r] = rc;
    snprintf(g->msgs[r], sizeof g->msgs[r], "%s", sck_last_error());
    for (int64_t i = 0; !rc && i < wz[0]; i++)
        g->bad[r] += memcmp(wb + i * wz[1], g->w + (size_t)(wo[0] + i) * WC + (size_t)wo[1], (size_t)wz[1] * 4) != 0;
    if (!rc && g->with_v) g->bad[r] += memcmp(vb, g->v + (size_t)vo[0] * WC, (size_t)(vz[0] * vz[1]) * 4) != 0;
    sck_state_free(st);
    free(wb);
    free(vb);
    return rc;
}

/* Saves the checkpoint on 2 ranks and finds where w's chunks (items and payloads) lie in their files. */
typedef struct layout {
    char file[2][64];
    uint64_t item[2], len[2], payload[2];
} layout;

/* The checkpoint's directory, under the test's own (valid until the test ends): setup_in's. */
static char g_dir[4096];

/* Into the directory `name` under the test's own; g is reset to load from there. */
static int setup_in(job *g, layout *L, const char *name) {
    memset(g, 0, sizeof *g);
    snprintf(g_dir, sizeof g_dir, "%s/%s", th_tmpdir(), name);
    const char *dir = g->dir = g_dir;
    g->w = malloc((size_t)WR * WC * 4);
    g->v = malloc((size_t)VR * WC * 4);
    th_fill(g->w, (size_t)WR * WC * 4, 51);
    th_fill(g->v, (size_t)VR * WC * 4, 52);
    g->hi = WR;
    if (sck_threads_run(2, save_rank, g)) return -1;
    sck_ckpt *ck;
    if (sck_ckpt_open(dir, &ck)) return -1;
    long wi = sck_ckpt_find(ck, "w");
    for (size_t k = 0; wi >= 0 && k < 2; k++) {
        sck_chunk_info ci;
        if (sck_ckpt_chunk(ck, (size_t)wi, k, &ci)) break;
        int b = ci.offsets[0] != 0;
        snprintf(L->file[b], sizeof L->file[b], "%s", ci.file);
        L->item[b] = ci.offset;
        L->len[b] = ci.length;
    }
    sck_ckpt_close(ck);
    for (int b = 0; b < 2; b++) { /* the payload: where the chunk's first row sits in the item */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, L->file[b]);
        size_t n;
        unsigned char *f = fx_read(path, &n);
        if (!f || L->item[b] + L->len[b] > n) return free(f), -1;
        const unsigned char *p = memmem(f + L->item[b], L->len[b], g->w + (size_t)b * WR / 2 * WC, 256);
        L->payload[b] = p ? (uint64_t)(p - f) : 0;
        free(f);
        if (!p) return -1;
    }
    return 0;
}

static int setup(job *g, layout *L) { return setup_in(g, L, "ck"); }

static void teardown(job *g) {
    free(g->w);
    free(g->v);
}

/* Loads on n ranks; returns the bytes the whole process read meanwhile. */
static uint64_t load_with(job *g, int n) {
    memset(g->rcs, 0, sizeof g->rcs);
    memset(g->bad, 0, sizeof g->bad);
    memset(g->rchar, 0, sizeof g->rchar);
    uint64_t extra = 0, ignore, before = rchar(1, &extra);
    sck_threads_run(n, load_rank, g);
    return rchar(1, &ignore) - before - extra;
}

static void expect_all_ok(const job *g, int n) {
    for (int r = 0; r < n; r++) {
        CHECK_OK(g->rcs[r]);
        CHECK(g->bad[r] == 0);
        if (g->rcs[r]) fprintf(stderr, "  rank %d: %s\n", r, g->msgs[r]);
    }
}

static void expect_all_checksum(const job *g, int n, const char *file) {
    for (int r = 0; r < n; r++) {
        CHECK(g->rcs[r] == SCK_ERR_CHECKSUM);
        CHECK(strstr(g->msgs[r], file) != NULL);
        CHECK(strstr(g->msgs[r], "'w' item at offset") != NULL);
        CHECK(strstr(g->msgs[r], "have CRC-32C") != NULL);
        if (g->rcs[r] != SCK_ERR_CHECKSUM) fprintf(stderr, "  rank %d: status %d: %s\n", r, g->rcs[r], g->msgs[r]);
    }
}

/* A flipped bit at file offset `at` of `file` fails the load on all n ranks with a checksum error
 * naming the file; the bit is flipped back after. */
static void flip_fails_all(job *g, const char *file, uint64_t at, int bit, int n) {
    REQUIRE(fx_flip(g->dir, file, at, bit) == 0);
    load_with(g, n);
    expect_all_checksum(g, n, file);
    REQUIRE(fx_flip(g->dir, file, at, bit) == 0);
}

/* The owner of an item is the rank needing most of it; ties go to the tied ranks by contiguous ranges
 * of item numbers; every rank names the same one from the same lists. */
TEST(load_checks_owner_most_bytes_ties_spread) {
    const lc_need r0[] = {{0, 100}, {1, 50}, {3, 7}, {4, 9}, {5, 9}}, r1[] = {{0, 100}, {1, 60}, {2, 5}, {4, 9}, {5, 9}},
                  r2[] = {{1, 60}, {3, 8}, {4, 9}, {5, 9}, {9, 1}};
    const lc_need *all[3] = {r0, r1, r2};
    size_t n[3] = {5, 5, 5};
    /* 10 items.  Item 0: ranks 0, 1 tie, 0 * 2 / 10 = 0 -> rank 0; item 1: ranks 1, 2 tie (rank 0's 50
     * is more than 1/8 below 60), 1 * 2 / 10 = 0 -> rank 1; item 2: only rank 1; item 3: rank 0's 7 is
     * within 1/8 of rank 2's 8, a near tie, 3 * 2 / 10 = 0 -> rank 0; items 4, 5: all three tie, 4 * 3
     * / 10 = 5 * 3 / 10 = 1 -> rank 1; item 9: rank 2. */
    const int want[10] = {0, 1, 1, 0, 1, 1, -1, -1, -1, 2};
    for (uint64_t item = 0; item < 10; item++) CHECK(lc_owner(all, n, 3, item, 10) == want[item]);
    /* All tied on 6 items: two each, in order. */
    const lc_need t[] = {{0, 4}, {1, 4}, {2, 4}, {3, 4}, {4, 4}, {5, 4}};
    const lc_need *tied[3] = {t, t, t};
    size_t tn[3] = {6, 6, 6};
    const int want6[6] = {0, 0, 1, 1, 2, 2};
    for (uint64_t item = 0; item < 6; item++) CHECK(lc_owner(tied, tn, 3, item, 6) == want6[item]);
    /* 1 -> 2 rows of an odd row count: 838 against 839 is a near tie, split in halves; 100 against 130
     * is not. */
    const lc_need a[] = {{0, 838}, {1, 838}, {2, 100}, {3, 838}}, b[] = {{0, 839}, {1, 839}, {2, 130}, {3, 839}};
    const lc_need *near[2] = {a, b};
    size_t nn[2] = {4, 4};
    const int want4[4] = {0, 0, 1, 1};
    for (uint64_t item = 0; item < 4; item++) CHECK(lc_owner(near, nn, 2, item, 4) == want4[item]);
}

/* 2 -> 3 ranks by rows: rank 1 needs rows 640..1279 (320 rows of each item, the least of both), so it
 * owns nothing.  Every rank reads its rows as one run, so each item is checked by combining the
 * readers' CRCs of their runs with the owner's of the rest: rank 1's thread reads only each item's
 * headers (64 KiB at each end; its runs go through its read-ahead thread), and the whole process reads
 * each item once plus the header windows (at most 64 KiB at each end of each item, per reader). */
/* With the model cache (.metadata.sck) the payload offsets are known, so no reader reads an item's
 * headers to find them; without it (a torch checkpoint) each reader reads a window at each end of each
 * item it reads part of. */
static void combined_items_read_once(int with_cache) {
    job g;
    layout L;
    REQUIRE(setup_in(&g, &L, with_cache ? "ck1" : "ck0") == 0);
    REQUIRE(L.len[0] > 2 * HEAD && L.len[1] > 2 * HEAD);
    char side[4200];
    snprintf(side, sizeof side, "%s/.metadata.sck", g.dir);
    REQUIRE(with_cache || remove(side) == 0);
    uint64_t heads = with_cache ? 0 : 4 * (uint64_t)HEAD;
    uint64_t total = load_with(&g, 3);
    expect_all_ok(&g, 3);
    CHECK(g.rchar[1] == heads);
    if (g.rchar[1] != heads) fprintf(stderr, "  rank 1 read %llu bytes\n", (unsigned long long)g.rchar[1]);
    /* Headers: 2 windows per reader of each item (4 readers of items), at most HEAD each. */
    CHECK(total >= L.len[0] + L.len[1]);
    CHECK(total <= L.len[0] + L.len[1] + 8 * (uint64_t)HEAD);
    if (total > L.len[0] + L.len[1] + 8 * (uint64_t)HEAD)
        fprintf(stderr, "  process read %llu bytes, items %llu\n", (unsigned long long)total, (unsigned long long)(L.len[0] + L.len[1]));
    /* Verification off: nobody checks, rank 1 reads its runs on its own thread. */
    for (int r = 0; r < 3; r++) g.flags[r] = SCK_LOAD_NO_VERIFY;
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    CHECK(g.rchar[1] == 2 * 320 * ROW + heads);
    teardown(&g);
}

TEST(load_checks_combined_items_read_once) {
    combined_items_read_once(1);
    combined_items_read_once(0);
}

/* A byte flipped where only a non-owner reads (rank 1's rows of item 0, or item 0's trailer, which
 * rank 1 reads as headers) fails the load on every rank: the owner's check catches it. */
TEST(load_checks_flip_seen_only_by_non_owner_fails_all_ranks) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    uint64_t at[] = {L.payload[0] + 700 * ROW + 8, L.payload[0] + 959 * ROW + ROW - 1, L.item[0] + L.len[0] - 30};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        flip_fails_all(&g, L.file[0], at[k], 0x20, 3);
    }
    /* The same in item 1, whose owner is rank 2. */
    flip_fails_all(&g, L.file[1], L.payload[1] + 100 * ROW, 0x01, 3);
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    teardown(&g);
}

/* By columns every rank needs a share of every item, about the same (341, 341 and 342 of 1024 columns
 * on 3 ranks): the ranks share a page cache, so each item goes to the rank whose part of the files
 * holds it (rank 0 the first, rank 1 the second; load_owners_of_column_blocks_follow_the_files).  A
 * flip in rank 0's columns fails all ranks, also in the item rank 1 owns. */
TEST(load_checks_columns_flip_in_non_owner_columns_fails_all_ranks) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.by_cols = 1;
    for (int n = 2; n <= 3; n++) {
        load_with(&g, n);
        expect_all_ok(&g, n);
        for (int b = 0; b < 2; b++) {
            uint64_t at = L.payload[b] + 500 * ROW + 10 * 4;
            flip_fails_all(&g, L.file[b], at, 0x80, n);
        }
    }
    teardown(&g);
}

/* Column blocks of large items: the owner reads each item in one pass to check it, and thread ranks
 * share an address space, so it copies every other rank's columns out of that pass too
 * (load_handoff.h): the process reads each item once, where each rank used to stream the whole item
 * again for its share (about n times the items).  Two ranks wanting the same columns cannot be served
 * by one ordered pass; the owner then copies their columns after its check, still right.  A flip in a
 * handed-over rank's columns, or in columns nobody wants, fails every rank. */
TEST(load_columns_owner_copies_the_other_ranks_columns_in_its_pass) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    struct stat sa, sb;
    char p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/.metadata", g.dir);
    snprintf(p2, sizeof p2, "%s/.metadata.sck", g.dir);
    REQUIRE(stat(p1, &sa) == 0 && stat(p2, &sb) == 0);
    uint64_t items = L.len[0] + L.len[1], meta = (uint64_t)sa.st_size + (uint64_t)sb.st_size;
    g.by_cols = 1;
    for (int n = 2; n <= 4; n++) {
        uint64_t got = load_with(&g, n);
        expect_all_ok(&g, n);
        CHECK(got >= items && got <= items + meta + 8192);
        if (got > items + meta + 8192)
            fprintf(stderr, "  %d ranks read %llu bytes, items %llu\n", n, (unsigned long long)got, (unsigned long long)items);
    }
    uint64_t at = L.payload[1] + 700 * ROW + 100 * 4; /* column 100: rank 0's of 3, in the item rank 1 owns */
    flip_fails_all(&g, L.file[1], at, 0x10, 3);
    /* Ranks 0 and 1 want the same columns, rank 2 the rest. */
    g.by_cols = 2;
    const int64_t lo[3] = {0, 0, 300}, hi[3] = {300, 300, WC};
    for (int r = 0; r < 3; r++) g.col_lo[r] = lo[r], g.col_hi[r] = hi[r];
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    flip_fails_all(&g, L.file[0], L.payload[0] + 10 * ROW + 5 * 4, 0x02, 3);
    /* Columns 0..300 only, a hundred a rank: the pass reads the columns nobody wants around theirs
     * (into nothing of anyone's) and still checks them: a flip in column 800 fails every rank. */
    for (int r = 0; r < 3; r++) g.col_lo[r] = 100 * r, g.col_hi[r] = 100 * (r + 1);
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    flip_fails_all(&g, L.file[1], L.payload[1] + 200 * ROW + 800 * 4, 0x04, 3);
    teardown(&g);
}

/* Which rank checks each of w's two items (ckpt_peer_mark 0 on that rank only), as lc_assign plans a
 * column-block load on n thread ranks. */
typedef struct owners_job {
    const char *dir;
    int n;
    int mark[8][2];
    int rc[8];
} owners_job;

static int owners_rank(sck_comm *c, void *arg) {
    owners_job *o = arg;
    int r = sck_comm_rank(c), n = sck_comm_size(c);
    sck_ckpt *ck = NULL;
    int rc = sck_ckpt_open(o->dir, &ck);
    long wi = rc ? -1 : sck_ckpt_find(ck, "w");
    if (!rc && wi < 0) rc = SCK_ERR_MISSING_KEY;
    sck_box box = {2, {0, WC * r / n}, {WR, WC * (r + 1) / n - WC * r / n}};
    ck_want want = {(size_t)(wi < 0 ? 0 : wi), &box, NULL};
    ck_reads rd = {NULL, 0};
    if (!rc) {
        ck->verify = 1;
        ck->rank = r;
        ck->nranks = n;
        ck->one_cache = comm_one_node(c);
        rc = ckpt_plan_reads(ck, &want, 1, &rd);
    }
    rc = lc_assign(c, ck, &want, &rd, rc);
    for (int k = 0; !rc && k < 2; k++) o->mark[r][k] = ckpt_peer_mark(ck, (size_t)wi, (size_t)k);
    sck_big_free(rd.op);
    sck_ckpt_close(ck);
    o->rc[r] = rc;
    return rc;
}

/* Ranks that share a page cache and need about the same of a large item read as many short runs (a
 * column block each: no combined check) give its check to the rank whose part of the files holds it,
 * as for small items: each owner then streams one stretch of the files, as a plain parallel read
 * does, instead of taking whole tensors, one chunk in every rank's file.  On 3 ranks w's first item
 * (file 0) goes to rank 0 and its second (file 1, halfway through the files) to rank 1, where the rank
 * with the most columns (rank 2, 342 of 1024) used to take both. */
TEST(load_owners_of_column_blocks_follow_the_files) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    REQUIRE(strcmp(L.file[0], L.file[1]) < 0); /* w's item 0 lies in the first file */
    for (int n = 2; n <= 4; n++) {
        owners_job o;
        memset(&o, 0, sizeof o);
        o.dir = g.dir;
        o.n = n;
        REQUIRE_OK(sck_threads_run(n, owners_rank, &o));
        for (int k = 0; k < 2; k++) {
            int want_owner = k * n / 2; /* the file's first item: file k starts k/2 of the way through */
            for (int r = 0; r < n; r++) {
                CHECK(o.mark[r][k] == (r == want_owner ? 0 : 1));
                if (o.mark[r][k] != (r == want_owner ? 0 : 1))
                    fprintf(stderr, "  %d ranks, item %d: rank %d has mark %d\n", n, k, r, o.mark[r][k]);
            }
        }
    }
    teardown(&g);
}

/* Rank 0 loads without verification, so it owns nothing even where it needs the most: rank 1 checks
 * item 0, and a flip in rank 0's rows still fails every rank. */
TEST(load_checks_rank_without_verify_owns_nothing) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.flags[0] = SCK_LOAD_NO_VERIFY;
    REQUIRE(fx_flip(g.dir, L.file[0], L.payload[0] + 3 * ROW, 0x04) == 0);
    load_with(&g, 3);
    expect_all_checksum(&g, 3, L.file[0]);
    teardown(&g);
}

/* Items no rank reads are not checked: a flip in w's second item and in v loads fine when the ranks
 * request only rows of w's first item (v then is an unexpected key; "absent" is allowed missing). */
TEST(load_checks_items_nobody_reads_are_not_checked) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    REQUIRE(fx_flip(g.dir, L.file[1], L.payload[1] + 10 * ROW, 0x02) == 0);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(g.dir, &ck));
    long vi = sck_ckpt_find(ck, "v");
    sck_chunk_info vc;
    char vfile[64] = "";
    int have_v = vi >= 0 && sck_ckpt_chunk(ck, (size_t)vi, 0, &vc) == 0;
    if (have_v) snprintf(vfile, sizeof vfile, "%s", vc.file);
    sck_ckpt_close(ck);
    REQUIRE(have_v);
    REQUIRE(fx_flip(g.dir, vfile, vc.offset + vc.length / 2, 0x02) == 0);
    g.lo = 0;
    g.hi = WR / 2;
    g.absent = 1;
    for (int r = 0; r < 3; r++) g.flags[r] = SCK_LOAD_ALLOW_MISSING;
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    /* Asking for v too: its item is read, and checked. */
    g.with_v = 1;
    load_with(&g, 3);
    for (int r = 0; r < 3; r++) {
        CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
        CHECK(strstr(g.msgs[r], "'v' item at offset") != NULL);
    }
    teardown(&g);
}

/* Combined checks where the owner reads more than headers: rows nobody requested (rows 0..99 of item 0
 * when the ranks load rows 100..1799) are read by the owner only to checksum them, and a flip there
 * fails every rank; so does one in a reader's rows, also with O_DIRECT reads. */
TEST(load_checks_combined_flip_in_owner_gap_fails_all_ranks) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.lo = 100;
    g.hi = 1800;
    for (int direct = 0; direct < 2; direct++) {
        for (int r = 0; r < 3; r++) g.flags[r] = direct ? SCK_LOAD_DIRECT_IO : 0;
        load_with(&g, 3);
        expect_all_ok(&g, 3);
        uint64_t at[] = {L.payload[0] + 50 * ROW + 4, L.payload[0] + 900 * ROW, L.payload[1] + 959 * ROW + 17, L.item[1] + 40};
        for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
            int b = k >= 2;
            flip_fails_all(&g, L.file[b], at[k], 0x10, 3);
        }
    }
    teardown(&g);
}

/* Replicated loads: all 3 ranks read every row, so their runs overlap; the first of equal runs (the
 * lowest rank's) is the segment, the others only copy.  Every byte is still checked once: a flip in
 * either item fails every rank, and the process reads each item once per rank plus headers. */
TEST(load_checks_combined_replicated_readers) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.replicated = 1;
    uint64_t total = load_with(&g, 3);
    expect_all_ok(&g, 3);
    CHECK(total <= 3 * (L.len[0] + L.len[1]) + 12 * (uint64_t)HEAD);
    for (int b = 0; b < 2; b++) {
        uint64_t at = L.payload[b] + 333 * ROW + 2;
        flip_fails_all(&g, L.file[b], at, 0x08, 3);
    }
    teardown(&g);
}

/* A rank that reads a chunk whole owns and checks its item whole, so planning needs no runs of it; a
 * partial read lists its run, worked out when the reads were planned from the model cache's payload
 * offset.  Neither resolves the item (no item header is read before the load proper). */
TEST(load_checks_whole_chunks_are_not_resolved_to_plan) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    for (int partial = 0; partial < 2; partial++) {
        sck_ckpt *ck;
        REQUIRE_OK(sck_ckpt_open(g.dir, &ck));
        int64_t wo[2] = {WR / 2, 0}, wz[2] = {WR / 2 - partial, WC};
        uint8_t *wire = NULL;
        size_t n = 0;
        long wi = sck_ckpt_find(ck, "w");
        REQUIRE(wi >= 0);
        sck_box box;
        memset(&box, 0, sizeof box);
        box.ndim = 2;
        box.off[0] = wo[0], box.size[0] = wz[0], box.size[1] = wz[1];
        ck_want want = {(size_t)wi, &box, g.w};
        ck_reads rd;
        REQUIRE_OK(ckpt_plan_reads(ck, &want, 1, &rd));
        REQUIRE_OK(lc_needs(ck, &want, &rd, &wire, &n, NULL));
        sck_big_free(rd.op);
        /* one record, varints: {item, bytes, runs} and, when partial, its one run {offset, length} */
        uint64_t rec[5] = {0};
        const uint8_t *q = wire;
        int k = 0;
        while (q < wire + n && k < 5 && sck_get_varint(&q, wire + n, &rec[k])) k++;
        CHECK(q == wire + n && k == (partial ? 5 : 3));
        uint64_t item = 1; /* w's second chunk, counted across entries */
        for (long i = 0; i < wi; i++) item += ck->m.e[i].nchunks;
        CHECK(rec[0] == item);
        CHECK(rec[1] == (uint64_t)wz[0] * ROW);
        CHECK(rec[2] == (uint64_t)partial);
        if (partial) CHECK(rec[3] == L.payload[1] && rec[4] == (uint64_t)wz[0] * ROW);
        CHECK(!(ck->res[wi] != NULL && ck->res[wi][1].done));
        sck_big_free(wire);
        sck_ckpt_close(ck);
    }
    teardown(&g);
}

/* The file (file[64]) and file offset (*at) of the payload of v's first item (its rows 0..31). */
static int v_first_payload(const char *dir, char *file, uint64_t *at) {
    sck_ckpt *ck;
    if (sck_ckpt_open(dir, &ck)) return -1;
    long vi = sck_ckpt_find(ck, "v");
    sck_chunk_info ci;
    int rc = vi >= 0 && !sck_ckpt_chunk(ck, (size_t)vi, 0, &ci) && ci.offsets[0] == 0 && ck->m.e[vi].chunks[0].payload > 0 ? 0 : -1;
    if (!rc) {
        *at = ci.offset + ck->m.e[vi].chunks[0].payload;
        snprintf(file, 64, "%s", ci.file); /* borrowed from ck */
    }
    sck_ckpt_close(ck);
    return rc;
}

/* Small items (v's 128 KiB row blocks) are not combined: each one's owner reads it whole and checks
 * it.  Thread ranks share one page cache, so a small item's owner is the rank whose part of the files
 * holds it (load_checks.c's part_owner): v's first item, at the start of file 0, goes to rank 0; its
 * second, at the start of file 1, halfway through the files, to rank 1 (not to rank 2, which needs
 * more of it).  Rank 2 owns neither and wants rows 42..63 of the second: thread ranks share an address
 * space, so rank 1 copies them into rank 2's buffer once it has checked the item (load_handoff.h),
 * and rank 2 reads nothing of v at all, yet holds the right rows. */
TEST(load_checks_small_items_owner_hands_the_other_rank_its_rows) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.with_v = 1;
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    /* w's items are large and combined: rank 2 reads its rows of w on the read-ahead thread, and as
     * the owner of w's second item the bytes at each end of it (the gaps nobody else reads): its
     * headers (with the padding that puts a payload of 2 MiB or more on a 32 KiB boundary) and zip
     * directory, to the byte, which our layout gives (64 KiB at each end before the model knew the
     * directory's length); of v, nothing (it read rows 42..63, (VR - VR * 2 / 3) * ROW
     * bytes more, before the hand-over). */
    sck_ckpt *wck;
    REQUIRE_OK(sck_ckpt_open(g.dir, &wck));
    long wi = sck_ckpt_find(wck, "w");
    REQUIRE(wi >= 0 && wck->m.e[wi].nchunks == 2);
    const ck_chunk *w1 = &wck->m.e[wi].chunks[1];
    uint64_t want2 = w1->payload + w1->tail;
    REQUIRE(w1->payload > 0 && w1->tail > 0 && want2 < (32 << 10) + 8192);
    sck_ckpt_close(wck);
    CHECK(g.rchar[2] == want2);
    if (g.rchar[2] != want2) fprintf(stderr, "  rank 2 read %llu bytes, not %llu\n", (unsigned long long)g.rchar[2], (unsigned long long)want2);
    CHECK(g.rchar[1] >= (uint64_t)(VR / 2) * ROW); /* the owner of v's second item read all of it */
    /* A flipped byte in rank 1's rows of v's first item is still caught, by that item's owner. */
    char file[64];
    uint64_t at;
    REQUIRE(v_first_payload(g.dir, file, &at) == 0);
    at += 25 * ROW;
    REQUIRE(fx_flip(g.dir, file, at, 0x01) == 0);
    load_with(&g, 3);
    for (int r = 0; r < 3; r++) CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
    CHECK(strstr(g.msgs[1], "'v' item at offset") != NULL);
    teardown(&g);
}

/* With 6 ranks each of v's items (32 rows) is read by three ranks: its owner reads it whole with the
 * other two ranks' rows going straight into their buffers in the same read (src/load/read_plan.c place_hands),
 * one run before its own rows and one after, or both on one side; with 8 ranks, four readers, three
 * hand-overs, more than are read in place, so the owner copies them after its check.  Every rank holds
 * the right rows either way, and a flipped byte in any reader's rows fails every rank. */
TEST(load_checks_small_item_hand_overs_read_in_place) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.with_v = 1;
    char file[64];
    uint64_t base;
    REQUIRE(v_first_payload(g.dir, file, &base) == 0);
    for (int n = 6; n <= 8; n += 2) {
        load_with(&g, n);
        expect_all_ok(&g, n);
        for (int row = 1; row < VR / 2; row += 10) { /* rows 1, 11, 21, 31: the first item's readers each */
            REQUIRE(fx_flip(g.dir, file, base + (uint64_t)row * ROW + 8, 0x04) == 0);
            load_with(&g, n);
            for (int r = 0; r < n; r++) CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
            REQUIRE(fx_flip(g.dir, file, base + (uint64_t)row * ROW + 8, 0x04) == 0);
        }
    }
    load_with(&g, 6);
    expect_all_ok(&g, 6);
    teardown(&g);
}

/* A small item read on its own goes through a read window that also holds the items after it, but
 * the window stops at the next large item: here each file holds v's item (128 KiB) and then w's
 * (3.75 MiB), and loading just v on one rank reads v's two items and nothing of w's. */
TEST(load_small_item_window_stops_at_the_next_large_item) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(g.dir, &ck));
    long vi = sck_ckpt_find(ck, "v");
    REQUIRE(vi >= 0);
    uint64_t vlen = 0;
    for (size_t k = 0; k < 2; k++) {
        sck_chunk_info ci;
        REQUIRE_OK(sck_ckpt_chunk(ck, (size_t)vi, k, &ci));
        int b = ci.offsets[0] != 0;
        REQUIRE(!strcmp(ci.file, L.file[b]));
        REQUIRE(ci.offset + ci.length <= L.item[b]); /* v's item lies before w's in its file */
        vlen += ci.length;
    }
    sck_ckpt_close(ck);
    float *v = calloc((size_t)VR * WC, 4);
    REQUIRE(v);
    sck_state *st = sck_state_new();
    int64_t vs[2] = {VR, WC}, z[2] = {0, 0};
    REQUIRE_OK(sck_state_add_box(st, "v", SCK_F32, 2, vs, z, vs, v));
    sck_load_opts o = {SCK_LOAD_ALLOW_MISSING, {0}, 0};
    uint64_t extra = 0, ignore, before = rchar(0, &extra);
    CHECK_OK(sck_load(NULL, g.dir, st, &o));
    uint64_t got = rchar(0, &ignore) - before - extra;
    CHECK(!memcmp(v, g.v, (size_t)VR * WC * 4));
    /* v's items, .metadata and its model cache (a few KiB here), nothing near w's megabytes */
    CHECK(got >= vlen);
    CHECK(got < vlen + (256u << 10));
    if (got >= vlen + (256u << 10)) fprintf(stderr, "  read %llu bytes, v's items are %llu\n", (unsigned long long)got, (unsigned long long)vlen);
    sck_state_free(st);
    free(v);
    teardown(&g);
}

/* Without checks, a run of a large item (here 200 of w's 960-row item: 800 KiB) is read straight into
 * the caller's buffer: the rank reads that run, the item's headers and the metadata, not a read window
 * filled from the run to the item's end (2.9 MiB more) and copied out of. */
TEST(load_mid_size_run_of_large_item_reads_only_its_bytes) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.lo = 100, g.hi = 300;
    g.flags[0] = SCK_LOAD_NO_VERIFY;
    uint64_t got = load_with(&g, 1), run = 200 * ROW;
    expect_all_ok(&g, 1);
    CHECK(got >= run && got < run + (256u << 10));
    if (got >= run + (256u << 10)) fprintf(stderr, "  read %llu bytes for a run of %llu\n", (unsigned long long)got, (unsigned long long)run);
    teardown(&g);
}

/* A rank's list of the files or the items it reads arriving malformed (never from this code) fails
 * the load on every rank with a format error, rather than leaving some of them counting on checks
 * nobody makes.  The files' list (one byte for 2 files) comes first; the items' lists follow when two
 * ranks read one file (3 ranks load the 2 ranks' rows). */
TEST(load_checks_malformed_list_fails_the_load_everywhere) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    for (int bad = 1; bad <= 2; bad++) {
        g.garble_rank = bad;
        g.garble_min = 8;
        load_with(&g, 2);
        for (int r = 0; r < 2; r++) {
            CHECK(g.rcs[r] == SCK_ERR_FORMAT);
            CHECK(strstr(g.msgs[r], "list of the files it reads is malformed") != NULL);
        }
        g.garble_min = 9;
        load_with(&g, 3);
        for (int r = 0; r < 3; r++) {
            CHECK(g.rcs[r] == SCK_ERR_FORMAT);
            CHECK(strstr(g.msgs[r], "list of the items it reads is malformed") != NULL);
        }
    }
    g.garble_rank = 0;
    load_with(&g, 2);
    expect_all_ok(&g, 2);
    teardown(&g);
}

/* Column blocks on ranks that share no address space (the communicator here hides that they are
 * threads, as MPI ranks would): each item's owner checks it whole, and the others stream the span of it
 * that holds their columns, their runs read straight into their buffers and the bytes between dropped
 * (rp_start_scatter without checksums).  The columns arrive exact; a flip in a column block of a rank
 * that does not check the item still fails every rank (the owner's check). */
TEST(load_columns_on_ranks_apart_stream_their_span_into_place) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.count_gathers = 1;
    g.by_cols = 1;
    for (int n = 2; n <= 3; n++) {
        load_with(&g, n);
        expect_all_ok(&g, n);
    }
    for (int b = 0; b < 2; b++) flip_fails_all(&g, L.file[b], L.payload[b] + 300 * ROW + 1000 * 4, 0x08, 3);
    teardown(&g);
}

/* Ranks that read disjoint files (the split of the save: rank r reads file r) share no item: each
 * checks what it reads, and no lists of items are made or exchanged (only the 8-byte status and a
 * bitmap of the files each reads; the items' lists are longer), and the load ends with one
 * agreement, no gather of CRCs to combine.  A flipped byte in either file still fails every rank.
 * With a row split across the files (3 ranks) the lists are exchanged again. */
TEST(load_checks_ranks_reading_disjoint_files_exchange_no_lists) {
    job g;
    layout L;
    REQUIRE(setup(&g, &L) == 0);
    g.count_gathers = 1;
    g.with_v = 1;
    load_with(&g, 2);
    expect_all_ok(&g, 2);
    /* Ranks apart (the communicator hides that they are threads): rank 0's status, its model
     * broadcast and the agreement on it; the bitmaps; the last agreement. */
    for (int r = 0; r < 2; r++) CHECK(g.most[r] == 9 && g.calls[r] == 5);
    for (int b = 0; b < 2; b++) {
        flip_fails_all(&g, L.file[b], L.payload[b] + 500 * ROW + 4, 0x10, 2);
    }
    load_with(&g, 3);
    expect_all_ok(&g, 3);
    for (int r = 0; r < 3; r++) CHECK(g.most[r] > 9 && g.calls[r] > 6); /* + the lists, + the CRCs' gather */
    teardown(&g);
}
