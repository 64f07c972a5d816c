/* test_load_engine.c - the read paths of a load: items larger than a read window read by columns (one
 * pass that checks and copies), a row block inside a saved chunk (read it, then check the rest of the
 * item), many small items served from the windows, and flipped bytes caught on each path. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"

#define BR 640                /* big: [640, 4096] f32 = 10 MiB, saved as 2 row blocks of 5 MiB */
#define BC 4096
#define NSMALL 600            /* small: 600 tensors [6, 10] f32, saved by 2 ranks */

typedef struct eng {
    float *big;               /* the global tensors */
    float *small;
    const char *dir;
    int by_cols;              /* load: column blocks instead of row blocks */
    unsigned flags;           /* load flags */
    int shift;                /* bytes the destination of "big" starts past a 4 KiB boundary */
    int every;                /* load: only every `every`-th small tensor (0 or 1: all) */
    int nload;
    int rcs[8];
    char msgs[8][512];
    int bad[8];               /* elements that differ from the global tensors */
    uint64_t syscr[8];        /* read system calls each rank's thread made in sck_load */
} eng;

static int save_rank(sck_comm *c, void *arg) {
    eng *g = arg;
    int r = sck_comm_rank(c);
    sck_state *st = sck_state_new();
    int64_t bs[2] = {BR, BC}, bo[2] = {r * BR / 2, 0}, bz[2] = {BR / 2, BC};
    int rc = sck_state_add_box(st, "big", SCK_F32, 2, bs, bo, bz, g->big + (size_t)r * BR / 2 * BC);
    for (int t = 0; t < NSMALL && !rc; t++) {
        char key[32];
        snprintf(key, sizeof key, "small.%03d", t);
        int64_t ss[2] = {6, 10}, so[2] = {3 * r, 0}, sz[2] = {3, 10};
        rc = sck_state_add_box(st, key, SCK_F32, 2, ss, so, sz, g->small + (size_t)t * 60 + 30 * r);
    }
    if (!rc) rc = sck_save(c, g->dir, st, NULL);
    sck_state_free(st);
    return rc;
}

/* Rank r of n loads its row (or column) block of big and of every small tensor and compares. */
static int load_rank(sck_comm *c, void *arg) {
    eng *g = arg;
    int r = sck_comm_rank(c), n = sck_comm_size(c);
    int64_t blo = (g->by_cols ? BC : BR) * r / n, bhi = (g->by_cols ? BC : BR) * (r + 1) / n;
    int64_t bs[2] = {BR, BC}, bo[2], bz[2];
    if (g->by_cols) bo[0] = 0, bo[1] = blo, bz[0] = BR, bz[1] = bhi - blo;
    else bo[0] = blo, bo[1] = 0, bz[0] = bhi - blo, bz[1] = BC;
    size_t bbytes = (size_t)(bz[0] * bz[1]) * 4;
    uint8_t *mem = aligned_alloc(4096, (bbytes + 8191) / 4096 * 4096); /* C11: a multiple of the alignment */
    float *bb = (float *)(void *)(mem + g->shift);
    int64_t slo = 6 * r / n, shi = 6 * (r + 1) / n;
    float *sb = calloc((size_t)NSMALL * 60, 4);
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "big", SCK_F32, 2, bs, bo, bz, bb);
    for (int t = 0; t < NSMALL && !rc; t++) {
        char key[32];
        snprintf(key, sizeof key, "small.%03d", t);
        int64_t ss[2] = {6, 10}, so[2] = {slo, 0}, sz[2] = {shi - slo, 10};
        if (shi > slo && (g->every < 2 || t % g->every == 0)) rc = sck_state_add_box(st, key, SCK_F32, 2, ss, so, sz, sb + (size_t)t * 60);
    }
    sck_load_opts lo = {g->flags, {0}, 0};
    uint64_t before = fx_thread_io("syscr");
    if (!rc) rc = sck_load(c, g->dir, st, &lo);
    g->syscr[r] = fx_thread_io("syscr") - before;
    g->rcs[r] = rc;
    snprintf(g->msgs[r], sizeof g->msgs[r], "%s", sck_last_error());
    for (int64_t i = 0; !rc && i < bz[0]; i++)
        for (int64_t j = 0; j < bz[1]; j++)
            g->bad[r] += memcmp(&bb[i * bz[1] + j], &g->big[(size_t)(bo[0] + i) * BC + (size_t)(bo[1] + j)], 4) != 0; /* bits: NaNs */
    for (int t = 0; !rc && t < NSMALL; t++)
        if (g->every < 2 || t % g->every == 0) g->bad[r] += memcmp(sb + (size_t)t * 60, g->small + (size_t)t * 60 + slo * 10, (size_t)(shi - slo) * 40) != 0;
    sck_state_free(st);
    free(mem);
    free(sb);
    return rc;
}

static void setup(eng *g, const char *dir) {
    memset(g, 0, sizeof *g);
    g->dir = dir;
    g->big = malloc((size_t)BR * BC * 4);
    g->small = malloc((size_t)NSMALL * 60 * 4);
    th_fill(g->big, (size_t)BR * BC * 4, 31);
    th_fill(g->small, (size_t)NSMALL * 60 * 4, 32);
}

static void teardown(eng *g) {
    free(g->big);
    free(g->small);
}

static void load_with(eng *g, int n, int by_cols) {
    g->nload = n;
    g->by_cols = by_cols;
    memset(g->rcs, 0, sizeof g->rcs);
    memset(g->bad, 0, sizeof g->bad);
    sck_threads_run(n, load_rank, g);
}

TEST(load_engine_exact_for_rows_columns_and_small_items) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    int shapes[][2] = {{2, 0}, {1, 0}, {3, 0}, {4, 0}, {3, 1}, {2, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        load_with(&g, shapes[k][0], shapes[k][1]);
        for (int r = 0; r < shapes[k][0]; r++) {
            CHECK_OK(g.rcs[r]);
            CHECK(g.bad[r] == 0);
        }
    }
    teardown(&g);
}

/* Byte `off` of rank 0's data file flipped: every way of reading the item it falls in reports it. */
static void flipped(uint64_t off, const char *expect) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    REQUIRE(fx_flip(dir, "__0_0.distcp", off, 0x10) == 0);
    int shapes[][2] = {{2, 0}, {3, 0}, {3, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        load_with(&g, shapes[k][0], shapes[k][1]);
        for (int r = 0; r < shapes[k][0]; r++) {
            CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
            CHECK(strstr(g.msgs[r], expect) != NULL);
            CHECK(strstr(g.msgs[r], "__0_0.distcp") != NULL);
        }
    }
    teardown(&g);
}

/* "big" is rank 0's first item: its payload starts at 4096 and is 5 MiB long. */
TEST(load_engine_flip_in_big_payload_start) { flipped(4096 + 10, "'big' item at offset 0 (chunk 0 at [0, 0])"); }
/* In the payload's last rows: outside the first rank's rows when 3 ranks load by rows. */
TEST(load_engine_flip_in_big_payload_end) { flipped(4096 + (5u << 20) - 100, "'big' item at offset 0"); }
/* In the item's trailer (the central directory after the payload). */
TEST(load_engine_flip_in_big_trailer) { flipped(4096 + (5u << 20) + 40, "have CRC-32C"); }

/* Big items one after another, each read on the pipe, with its last slice checked while the next is
 * read: a flipped byte in an item in the middle of the run, or in the last one (checked after the
 * reads), still fails the load naming that item, with either I/O mode; unflipped, the bytes are
 * exact. */
#define NRUN 4
#define RUN_ROWS 320 /* [320, 1024] f32: 1.25 MiB an item */

typedef struct run_job {
    const char *dir;
    float *src, *dst;
    int save;
    unsigned flags;
} run_job;

static int run_rank(sck_comm *c, void *arg) {
    run_job *j = arg;
    sck_state *st = sck_state_new();
    int rc = st ? SCK_OK : SCK_ERR_NOMEM;
    for (int t = 0; t < NRUN && !rc; t++) {
        char key[16];
        snprintf(key, sizeof key, "t%d", t);
        int64_t shape[2] = {RUN_ROWS, 1024}, off[2] = {0, 0};
        rc = sck_state_add_box(st, key, SCK_F32, 2, shape, off, shape, (j->save ? j->src : j->dst) + (size_t)t * RUN_ROWS * 1024);
    }
    sck_load_opts lo = {j->flags, {0}, 0};
    if (!rc) rc = j->save ? sck_save(c, j->dir, st, NULL) : sck_load(c, j->dir, st, &lo);
    sck_state_free(st);
    return rc;
}

TEST(load_engine_pending_checks_of_big_items_fail_the_load) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/run", th_tmpdir());
    size_t n = (size_t)NRUN * RUN_ROWS * 1024;
    run_job j = {dir, malloc(n * 4), aligned_alloc(4096, n * 4), 1, 0};
    REQUIRE(j.src && j.dst);
    th_fill(j.src, n * 4, 77);
    REQUIRE_OK(sck_threads_run(1, run_rank, &j));
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    uint64_t at[NRUN];
    for (size_t t = 0; t < NRUN; t++) {
        sck_entry_info e;
        sck_chunk_info ci;
        size_t ei = SIZE_MAX;
        for (size_t i = 0; sck_ckpt_entry(ck, i, &e) == SCK_OK; i++)
            if (e.key[0] == 't' && (size_t)(e.key[1] - '0') == t) ei = i;
        REQUIRE(ei != SIZE_MAX && sck_ckpt_chunk(ck, ei, 0, &ci) == SCK_OK);
        at[t] = ci.offset + ci.length / 2; /* inside the payload */
    }
    sck_ckpt_close(ck);
    j.save = 0;
    unsigned modes[] = {SCK_LOAD_DIRECT_IO, SCK_LOAD_BUFFERED_IO};
    for (int m = 0; m < 2; m++) {
        j.flags = modes[m];
        memset(j.dst, 0, n * 4);
        CHECK_OK(sck_threads_run(1, run_rank, &j));
        CHECK(memcmp(j.dst, j.src, n * 4) == 0);
        int bad[] = {1, NRUN - 1};
        for (int b = 0; b < 2; b++) {
            REQUIRE(fx_flip(dir, "__0_0.distcp", at[bad[b]], 0x08) == 0);
            CHECK(sck_threads_run(1, run_rank, &j) == SCK_ERR_CHECKSUM);
            char want[32];
            snprintf(want, sizeof want, "'t%d' item", bad[b]);
            CHECK(strstr(sck_last_error(), want) != NULL);
            REQUIRE(fx_flip(dir, "__0_0.distcp", at[bad[b]], 0x08) == 0); /* back */
        }
    }
    free(j.src);
    free(j.dst);
}

/* O_DIRECT reads: page-aligned destinations take the direct path, others (and short runs) stay
 * buffered; the bytes are the same either way, and checksums are still checked. */
TEST(load_engine_direct_io_exact_for_any_alignment) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    int shifts[] = {0, 64, 4000};
    for (size_t s = 0; s < 3; s++) {
        int shapes[][2] = {{2, 0}, {3, 0}, {3, 1}};
        for (size_t k = 0; k < 3; k++) {
            g.flags = SCK_LOAD_DIRECT_IO;
            g.shift = shifts[s];
            load_with(&g, shapes[k][0], shapes[k][1]);
            for (int r = 0; r < shapes[k][0]; r++) {
                CHECK_OK(g.rcs[r]);
                CHECK(g.bad[r] == 0);
            }
        }
    }
    REQUIRE(fx_flip(dir, "__1_0.distcp", 4096 + 100, 0x01) == 0);
    g.shift = 0;
    load_with(&g, 2, 0);
    CHECK(g.rcs[0] == SCK_ERR_CHECKSUM && g.rcs[1] == SCK_ERR_CHECKSUM);
    CHECK(strstr(g.msgs[0], "__1_0.distcp: 'big' item at offset 0 (chunk 1 at [320, 0])") != NULL);
    teardown(&g);
}

/* The default (no I/O flag): an item not in the page cache, read into a page-aligned destination, is
 * read with O_DIRECT, which leaves its pages out of the cache; SCK_LOAD_BUFFERED_IO reads it through
 * the cache.  Bytes and checks are the same every way.  Where the file system cannot drop pages or
 * lacks O_DIRECT (tmpfs), only the bytes are compared. */
TEST(load_engine_auto_io_direct_when_cold_buffered_when_asked) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    const uint64_t mid = 4096 + (5u << 20) / 2; /* inside rank 0's 5 MiB payload of "big", past its headers */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/__0_0.distcp", dir);
    int dfd = open(probe, O_RDONLY | O_DIRECT);
    int can_direct = dfd >= 0;
    if (dfd >= 0) close(dfd);
    REQUIRE(fx_evict(dir, "__0_0.distcp") == 0 && fx_evict(dir, "__1_0.distcp") == 0);
    int observable = can_direct && fx_resident(dir, "__0_0.distcp", mid) == 0;
    unsigned flags[] = {0, SCK_LOAD_BUFFERED_IO};
    for (size_t f = 0; f < 2; f++) {
        REQUIRE(fx_evict(dir, "__0_0.distcp") == 0 && fx_evict(dir, "__1_0.distcp") == 0);
        g.flags = flags[f];
        load_with(&g, 2, 0);
        for (int r = 0; r < 2; r++) {
            CHECK_OK(g.rcs[r]);
            CHECK(g.bad[r] == 0);
        }
        if (observable) CHECK(fx_resident(dir, "__0_0.distcp", mid) == (int)f);
    }
    if (!observable) fprintf(stderr, "  (page residency not observable here: bytes compared only)\n");
    /* Misaligned destinations stay buffered (and exact); a flipped byte is caught on the direct path. */
    g.flags = 0;
    g.shift = 64;
    REQUIRE(fx_evict(dir, "__0_0.distcp") == 0);
    load_with(&g, 2, 0);
    CHECK_OK(g.rcs[0]);
    CHECK(g.bad[0] == 0);
    if (observable) CHECK(fx_resident(dir, "__0_0.distcp", mid) == 1);
    g.shift = 0;
    REQUIRE(fx_flip(dir, "__0_0.distcp", mid, 0x01) == 0);
    REQUIRE(fx_evict(dir, "__0_0.distcp") == 0);
    load_with(&g, 2, 0);
    CHECK(g.rcs[0] == SCK_ERR_CHECKSUM && g.rcs[1] == SCK_ERR_CHECKSUM);
    /* Both I/O flags at once: refused on every rank. */
    g.flags = SCK_LOAD_DIRECT_IO | SCK_LOAD_BUFFERED_IO;
    load_with(&g, 2, 0);
    CHECK(g.rcs[0] == SCK_ERR_INVALID_ARG && g.rcs[1] == SCK_ERR_INVALID_ARG);
    teardown(&g);
}

/* Small items read in batches (one preadv: runs into the destination, headers and trailers aside):
 * exact when every item is requested and when only every 3rd or 50th is (gaps read or skipped), and a
 * flipped byte in an item's header, payload or trailer fails the load naming that item. */
TEST(load_engine_small_item_batches_exact_and_checked_whole) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    int every[] = {1, 3, 50};
    for (size_t k = 0; k < 3; k++) {
        g.every = every[k];
        load_with(&g, 2, 0);
        for (int r = 0; r < 2; r++) {
            CHECK_OK(g.rcs[r]);
            CHECK(g.bad[r] == 0);
        }
    }
    g.every = 0;
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_chunk_info ci;
    long e = sck_ckpt_find(ck, "small.123");
    REQUIRE(e >= 0);
    REQUIRE_OK(sck_ckpt_chunk(ck, (size_t)e, 0, &ci));
    REQUIRE(!strcmp(ci.file, "__0_0.distcp"));
    sck_ckpt_close(ck);
    size_t n = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/__0_0.distcp", dir);
    unsigned char *file = fx_read(path, &n);
    REQUIRE(file && ci.offset + ci.length <= n);
    const unsigned char *rows = (const unsigned char *)(g.small + 123 * 60); /* rank 0 saved rows 0..2 */
    uint64_t payload = 0;
    for (uint64_t i = ci.offset; i + 120 <= ci.offset + ci.length && !payload; i++)
        if (!memcmp(file + i, rows, 120)) payload = i;
    free(file);
    REQUIRE(payload > ci.offset);
    uint64_t at[] = {ci.offset + 10, payload + 60, ci.offset + ci.length - 5};
    for (size_t k = 0; k < 3; k++) {
        REQUIRE(fx_flip(dir, "__0_0.distcp", at[k], 0x04) == 0);
        load_with(&g, 2, 0);
        for (int r = 0; r < 2; r++) {
            CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
            CHECK(strstr(g.msgs[r], "'small.123' item at offset") != NULL);
        }
        REQUIRE(fx_flip(dir, "__0_0.distcp", at[k], 0x04) == 0);
    }
    load_with(&g, 2, 0);
    CHECK_OK(g.rcs[0]);
    CHECK_OK(g.rcs[1]);
    teardown(&g);
}

/* Thread ranks share a page cache: a rank reading rows of many small items that other ranks check
 * reads them in batches too (one preadv for its runs and the short gaps between them), not one
 * system call per item.  2 -> 3 ranks: the middle rank reads row 2 of each small tensor from
 * rank 0's file and row 3 from rank 1's, and checks only the items in its third of the files. */
TEST(load_engine_small_item_runs_of_peers_batched_for_thread_ranks) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    eng g;
    setup(&g, dir);
    REQUIRE_OK(sck_threads_run(2, save_rank, &g));
    REQUIRE(access("/proc/thread-self/io", R_OK) == 0);
    load_with(&g, 3, 0);
    for (int r = 0; r < 3; r++) {
        CHECK_OK(g.rcs[r]);
        CHECK(g.bad[r] == 0);
    }
    /* 1200 small runs, about two thirds of them in items another rank checks */
    CHECK(g.syscr[1] > 0 && g.syscr[1] < 100);
    /* a flipped byte in a row the middle rank reads, in an item rank 0 checks, still fails the load */
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_chunk_info ci;
    long e = sck_ckpt_find(ck, "small.010");
    REQUIRE(e >= 0);
    REQUIRE_OK(sck_ckpt_chunk(ck, (size_t)e, 0, &ci));
    char name[256];
    snprintf(name, sizeof name, "%s", ci.file);
    sck_ckpt_close(ck);
    size_t n = 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unsigned char *file = fx_read(path, &n);
    REQUIRE(file && ci.offset + ci.length <= n);
    const unsigned char *row2 = (const unsigned char *)(g.small + 10 * 60 + 20);
    uint64_t at = 0;
    for (uint64_t i = ci.offset; i + 40 <= ci.offset + ci.length && !at; i++)
        if (!memcmp(file + i, row2, 40)) at = i + 8;
    free(file);
    REQUIRE(at > 0);
    REQUIRE(fx_flip(dir, name, at, 0x02) == 0);
    load_with(&g, 3, 0);
    for (int r = 0; r < 3; r++) CHECK(g.rcs[r] == SCK_ERR_CHECKSUM);
    teardown(&g);
}
