/* test_async.c - sck_save_async / sck_wait (snapshot and no-copy modes, the communicator between the
 * two, errors from the background writer, misuse), and the save engine's options: staging size,
 * O_DIRECT, 4 KiB payload alignment in the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "io/io_hook.h"
#include "format/zip.h"

#define RANKS 3
#define ROWS 96               /* 32 rows a rank */
#define COLS 4096             /* a rank's piece of "big": 32 x 4096 x 4 = 512 KiB, over the by-reference size */
#define SMALL 1000            /* "small": 1000 floats */

/* One test's global tensors; rank r owns rows [32r, 32r+32) of big and a third of small. */
typedef struct world {
    float *big, *small;       /* the caller's live buffers */
    float *big0, *small0;     /* what was saved */
    const char *dir;
    unsigned flags;
    unsigned staging_mib;
    sck_async *h[RANKS];
    int rc_async[RANKS], rc_wait[RANKS];
    char msg[RANKS][512];
    int mutate;               /* overwrite the buffers between sck_save_async and sck_wait */
    int talk;                 /* use the communicator between sck_save_async and sck_wait */
    int talk_rc[RANKS];
    int twice;                /* call sck_save_async a second time before sck_wait */
    int twice_rc[RANKS];
    char twice_msg[RANKS][512];
} world;

static void world_init(world *w, const char *dir) {
    memset(w, 0, sizeof *w);
    w->dir = dir;
    size_t nb = (size_t)ROWS * COLS;
    w->big = mmap(NULL, nb * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* page-aligned */
    w->big0 = malloc(nb * 4);
    w->small = malloc(SMALL * 4);
    w->small0 = malloc(SMALL * 4);
    th_fill(w->big, nb * 4, 21);
    th_fill(w->small, SMALL * 4, 22);
    memcpy(w->big0, w->big, nb * 4);
    memcpy(w->small0, w->small, SMALL * 4);
    for (int r = 0; r < RANKS; r++) w->h[r] = sck_async_new();
}

static void world_free(world *w) {
    munmap(w->big, (size_t)ROWS * COLS * 4);
    free(w->big0);
    free(w->small);
    free(w->small0);
    for (int r = 0; r < RANKS; r++) sck_async_free(w->h[r]);
}

static sck_state *rank_state(world *w, int r) {
    sck_state *st = sck_state_new();
    int64_t bs[2] = {ROWS, COLS}, bo[2] = {32 * r, 0}, bz[2] = {32, COLS};
    int64_t ss[1] = {SMALL};
    int64_t lo = SMALL * r / RANKS, hi = SMALL * (r + 1) / RANKS;
    sck_state_add_box(st, "model.big", SCK_F32, 2, bs, bo, bz, w->big + (size_t)32 * r * COLS);
    sck_state_add_flat(st, "model.small", SCK_F32, 1, ss, lo, hi - lo, w->small + lo);
    sck_state_add_value(st, "other.step", sck_value_int(7));
    return st;
}

static int async_rank(sck_comm *c, void *arg) {
    world *w = arg;
    int r = sck_comm_rank(c);
    sck_state *st = rank_state(w, r);
    sck_save_opts o = {w->flags, w->staging_mib, {0}};
    w->rc_async[r] = sck_save_async(w->h[r], c, w->dir, st, &o);
    sck_state_free(st); /* allowed right away */
    if (w->twice) {
        sck_state *st2 = rank_state(w, r);
        w->twice_rc[r] = sck_save_async(w->h[r], c, w->dir, st2, &o);
        snprintf(w->twice_msg[r], sizeof w->twice_msg[r], "%s", sck_last_error());
        sck_state_free(st2);
    }
    if (w->mutate && !(w->flags & SCK_SAVE_NO_COPY)) { /* each rank overwrites its own rows at once */
        memset(w->big + (size_t)32 * r * COLS, 0xab, (size_t)32 * COLS * 4);
        int64_t lo = SMALL * r / RANKS, hi = SMALL * (r + 1) / RANKS;
        memset(w->small + lo, 0xcd, (size_t)(hi - lo) * 4);
    }
    if (w->talk) w->talk_rc[r] = sck_comm_agree(c, SCK_OK); /* the caller's own collective in between */
    w->rc_wait[r] = sck_wait(w->h[r]);
    snprintf(w->msg[r], sizeof w->msg[r], "%s", sck_last_error());
    return w->rc_wait[r];
}

/* Loads dir on one rank and compares with what was saved. */
static int load_matches(world *w) {
    size_t nb = (size_t)ROWS * COLS;
    float *big = calloc(nb, 4), *small = calloc(SMALL, 4);
    sck_state *st = sck_state_new();
    int64_t bs[2] = {ROWS, COLS}, z[2] = {0, 0}, ss[1] = {SMALL};
    sck_state_add_box(st, "model.big", SCK_F32, 2, bs, z, bs, big);
    sck_state_add_box(st, "model.small", SCK_F32, 1, ss, z, ss, small);
    sck_state_add_value(st, "other.step", NULL);
    int rc = sck_load(NULL, w->dir, st, NULL);
    const sck_value *v = sck_state_value(st, "other.step");
    int ok = rc == SCK_OK && !memcmp(big, w->big0, nb * 4) && !memcmp(small, w->small0, SMALL * 4) && v &&
             sck_value_get_int(v) == 7;
    sck_state_free(st);
    free(big);
    free(small);
    return ok;
}

static void run(world *w) { sck_threads_run(RANKS, async_rank, w); }

TEST(async_snapshot_lets_caller_modify_buffers_before_wait) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    w.mutate = 1;
    w.talk = 1;
    run(&w);
    for (int r = 0; r < RANKS; r++) {
        CHECK_OK(w.rc_async[r]);
        CHECK_OK(w.rc_wait[r]);
        CHECK_OK(w.talk_rc[r]);
    }
    CHECK(load_matches(&w)); /* the bytes at sck_save_async time, not the overwritten ones */
    /* The handles are reusable: a second checkpoint of the current bytes replaces the first. */
    memcpy(w.big0, w.big, (size_t)ROWS * COLS * 4);
    memcpy(w.small0, w.small, SMALL * 4);
    w.mutate = 0;
    run(&w);
    for (int r = 0; r < RANKS; r++) CHECK_OK(w.rc_wait[r]);
    CHECK(load_matches(&w));
    world_free(&w);
}

TEST(async_no_copy_writes_from_caller_buffers) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    w.flags = SCK_SAVE_NO_COPY;
    run(&w);
    for (int r = 0; r < RANKS; r++) CHECK_OK(w.rc_wait[r]);
    CHECK(load_matches(&w));
    world_free(&w);
}

TEST(async_second_start_before_wait_is_refused_everywhere) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    w.twice = 1;
    run(&w);
    for (int r = 0; r < RANKS; r++) {
        CHECK_OK(w.rc_async[r]);
        CHECK(w.twice_rc[r] == SCK_ERR_INVALID_ARG);
        CHECK(strstr(w.twice_msg[r], "already pending") != NULL);
        CHECK_OK(w.rc_wait[r]); /* the first save still completes */
    }
    CHECK(load_matches(&w));
    world_free(&w);
}

TEST(async_wait_without_save_and_bad_flags) {
    sck_async *a = sck_async_new();
    REQUIRE(a);
    CHECK_OK(sck_wait(a));
    sck_state *st = sck_state_new();
    sck_save_opts o = {0x100, 0, {0}};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    CHECK_ERR(sck_save_async(a, NULL, dir, st, &o), SCK_ERR_INVALID_ARG, "unknown flags 0x100");
    CHECK_ERR(sck_save_async(NULL, NULL, dir, st, NULL), SCK_ERR_INVALID_ARG, "NULL handle");
    CHECK_OK(sck_wait(a)); /* nothing pending after a refused start */
    /* One rank with a single comm of its own: save and wait, then load. */
    float x[3] = {1, 2, 3}, y[3] = {0};
    int64_t s[1] = {3};
    sck_state_add_replicated(st, "x", SCK_F32, 1, s, x);
    CHECK_OK(sck_save_async(a, NULL, dir, st, NULL));
    x[0] = 99;
    CHECK_OK(sck_wait(a));
    sck_state *ld = sck_state_new();
    sck_state_add_replicated(ld, "x", SCK_F32, 1, s, y);
    CHECK_OK(sck_load(NULL, dir, ld, NULL));
    CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3);
    sck_state_free(ld);
    sck_state_free(st);
    sck_async_free(a);
}

/* ---- a write failing in the background thread comes back from sck_wait on every rank ---- */

typedef struct fail_ctx {
    long pwrites;
    long nth;
} fail_ctx;

static int fail_pwrite(void *ctx, io_kind kind, const char *path) {
    (void)path;
    fail_ctx *f = ctx;
    if (kind == IO_PWRITE && __atomic_add_fetch(&f->pwrites, 1, __ATOMIC_SEQ_CST) == f->nth) return ENOSPC;
    return 0;
}

TEST(async_writer_error_reaches_every_rank_and_keeps_old_checkpoint) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    run(&w); /* version A committed */
    for (int r = 0; r < RANKS; r++) REQUIRE_OK(w.rc_wait[r]);
    fail_ctx f = {0, 2};
    w.mutate = 1; /* the buffers change; the failed save must not publish them */
    io_hook_set(fail_pwrite, &f);
    run(&w);
    io_hook_set(NULL, NULL);
    for (int r = 0; r < RANKS; r++) {
        CHECK_OK(w.rc_async[r]);
        CHECK(w.rc_wait[r] == SCK_ERR_IO);
        CHECK(strstr(w.msg[r], "No space left on device") != NULL);
        CHECK(strstr(w.msg[r], ".distcp: write of") != NULL);
        CHECK(!strcmp(w.msg[r], w.msg[0]));
    }
    CHECK(load_matches(&w)); /* still version A */
    CHECK(fx_count_siblings(dir) == 0);
    world_free(&w);
}

/* Freeing a handle with a save pending abandons it; the next save into dir cleans up. */
static int abandon_rank(sck_comm *c, void *arg) {
    world *w = arg;
    int r = sck_comm_rank(c);
    sck_state *st = rank_state(w, r);
    w->rc_async[r] = sck_save_async(w->h[r], c, w->dir, st, NULL);
    sck_state_free(st);
    sck_async_free(w->h[r]);
    w->h[r] = sck_async_new();
    return w->rc_async[r];
}

TEST(async_free_with_pending_save_abandons_it) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    int fds = fx_count_fds();
    CHECK_OK(sck_threads_run(RANKS, abandon_rank, &w));
    CHECK(fx_count_fds() == fds);
    CHECK(fx_load_version(dir, 0) == -1); /* nothing was published */
    run(&w);
    for (int r = 0; r < RANKS; r++) CHECK_OK(w.rc_wait[r]);
    CHECK(load_matches(&w));
    CHECK(fx_count_siblings(dir) == 0);
    world_free(&w);
}

/* ---- the background writer yields the CPU: it runs 10 nice levels below its caller, SCHED_BATCH ---- */

typedef struct nice_ctx {
    int data_lo, data_hi;     /* nice values seen by writes of the data files (the writer threads) */
    int meta;                 /* and by the write of .metadata (rank 0's own thread, in sck_wait) */
    int data_batch, data_other; /* data file writes made under SCHED_BATCH, under any other policy */
    int meta_policy;
} nice_ctx;

static int record_nice(void *ctx, io_kind kind, const char *path) {
    nice_ctx *n = ctx;
    if (kind != IO_PWRITE) return 0;
    errno = 0;
    int v = getpriority(PRIO_PROCESS, 0); /* Linux: the calling thread */
    if (errno) v = 100;
    int pol = sched_getscheduler(0); /* Linux: the calling thread */
    if (strstr(path, ".distcp")) {
        __atomic_add_fetch(pol == SCHED_BATCH ? &n->data_batch : &n->data_other, 1, __ATOMIC_SEQ_CST);
        int lo = __atomic_load_n(&n->data_lo, __ATOMIC_SEQ_CST), hi = __atomic_load_n(&n->data_hi, __ATOMIC_SEQ_CST);
        while (v < lo && !__atomic_compare_exchange_n(&n->data_lo, &lo, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
        while (v > hi && !__atomic_compare_exchange_n(&n->data_hi, &hi, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        }
    } else if (strstr(path, "/.metadata") && !strstr(path, ".sck")) {
        __atomic_store_n(&n->meta, v, __ATOMIC_SEQ_CST);
        __atomic_store_n(&n->meta_policy, pol, __ATOMIC_SEQ_CST);
    }
    return 0;
}

static void save_recording_nice(world *w, unsigned flags, nice_ctx *n) {
    *n = (nice_ctx){100, -100, 100, 0, 0, -1};
    w->flags = flags;
    io_hook_set(record_nice, n);
    run(w);
    io_hook_set(NULL, NULL);
    for (int r = 0; r < RANKS; r++) CHECK_OK(w->rc_wait[r]);
}

TEST(async_writer_runs_below_the_callers_priority_unless_asked) {
    REQUIRE(sched_getscheduler(0) == SCHED_OTHER); /* the test's own threads: the policy the writer leaves */
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0); /* the thread ranks inherit this thread's value */
    REQUIRE(errno == 0);
    int low = base + 10 > 19 ? 19 : base + 10;
    nice_ctx n;
    save_recording_nice(&w, 0, &n);
    CHECK(n.data_lo == low && n.data_hi == low); /* every data file write, on every rank */
    CHECK(n.meta == base);                       /* sck_wait's own writes stay at the caller's */
    CHECK(n.data_batch > 0 && n.data_other == 0); /* its wake-ups never preempt the caller's threads */
    CHECK(n.meta_policy == SCHED_OTHER);
    CHECK(load_matches(&w));
    save_recording_nice(&w, SCK_SAVE_FULL_PRIORITY, &n);
    CHECK(n.data_lo == base && n.data_hi == base);
    CHECK(n.data_batch == 0 && n.data_other > 0 && n.meta_policy == SCHED_OTHER);
    CHECK(load_matches(&w));
    errno = 0;
    CHECK(getpriority(PRIO_PROCESS, 0) == base && errno == 0); /* the caller's thread is left alone */
    /* sck_save writes in the caller's threads: the flag is the async save's only. */
    sck_state *st = sck_state_new();
    sck_save_opts o = {SCK_SAVE_FULL_PRIORITY, 0, {0}};
    CHECK_ERR(sck_save(NULL, dir, st, &o), SCK_ERR_INVALID_ARG, "unknown flags 0x8");
    sck_state_free(st);
    world_free(&w);
}

/* ---- the engine's options with the plain sck_save ---- */

static int sync_rank(sck_comm *c, void *arg) {
    world *w = arg;
    int r = sck_comm_rank(c);
    sck_state *st = rank_state(w, r);
    sck_save_opts o = {w->flags, w->staging_mib, {0}};
    int rc = sck_save(c, w->dir, st, &o);
    sck_state_free(st);
    return rc;
}

/* Payload offset of the archive of chunk j of `key`, from its zip headers. */
static uint64_t payload_offset(const char *dir, const char *key, size_t j, uint64_t *size) {
    sck_ckpt *ck = NULL;
    if (sck_ckpt_open(dir, &ck)) return 1;
    sck_chunk_info ci;
    uint64_t off = 1;
    long i = sck_ckpt_find(ck, key);
    if (i >= 0 && sck_ckpt_chunk(ck, (size_t)i, j, &ci) == SCK_OK) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, ci.file);
        size_t n = 0;
        unsigned char *file = fx_read(path, &n);
        zip_mem zm = {file, n};
        zip_dir zd;
        if (file && zip_read_dir(zip_pread_mem, &zm, ci.offset, ci.length, path, &zd) == SCK_OK) {
            const zip_rec *rec = zip_find(&zd, "data/0");
            if (rec) {
                off = rec->data_off;
                *size = rec->size;
            }
            zip_dir_free(&zd);
        }
        free(file);
    }
    sck_ckpt_close(ck);
    return off;
}

static void save_with(unsigned flags, unsigned staging_mib) {
    world w;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    world_init(&w, dir);
    w.flags = flags;
    w.staging_mib = staging_mib;
    CHECK_OK(sck_threads_run(RANKS, sync_rank, &w));
    CHECK(load_matches(&w));
    uint64_t size = 0;
    for (size_t j = 0; j < RANKS; j++) {
        CHECK(payload_offset(dir, "model.big", j, &size) % 4096 == 0); /* 512 KiB payloads: page-aligned */
        CHECK(size == 32 * COLS * 4);
        CHECK(payload_offset(dir, "model.small", j, &size) % 64 == 0); /* small ones: torch's 64 */
        CHECK(size < 4096);
    }
    world_free(&w);
}

TEST(save_buffered_one_mib_staging_aligns_big_payloads) { save_with(0, 1); }
TEST(save_direct_io_loads_bit_exact) { save_with(SCK_SAVE_DIRECT_IO, 0); }
TEST(save_direct_io_without_fsync) { save_with(SCK_SAVE_DIRECT_IO | SCK_SAVE_NO_FSYNC, 2); }

/* A payload of 2 MiB or more starts on a 32 KiB boundary, after torch's 'Z' padding, whose
 * page-aligned part the writer takes by reference from constant memory: the file holds the padding
 * byte for byte, and the checkpoint verifies and loads bit-exact, with O_DIRECT and buffered. */
static void save_block_aligned(unsigned flags) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/blk%u", th_tmpdir(), flags);
    int64_t bs[2] = {768, 1024}, ss[1] = {37};
    size_t nb = 768 * 1024 * 4;
    float *big = mmap(NULL, nb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *back = malloc(nb);
    static float small[37], small_back[37];
    REQUIRE(big != MAP_FAILED && back);
    th_fill(big, nb, 51);
    th_fill(small, sizeof small, 52);
    sck_state *st = sck_state_new();
    CHECK_OK(sck_state_add_replicated(st, "model.a", SCK_F32, 1, ss, small)); /* an item before: the big one's offset is not 0 */
    CHECK_OK(sck_state_add_replicated(st, "model.big", SCK_F32, 2, bs, big));
    sck_save_opts o = {flags, 0, {0}};
    CHECK_OK(sck_save(NULL, dir, st, &o));
    sck_state_free(st);
    uint64_t size = 0, off = payload_offset(dir, "model.big", 0, &size);
    CHECK(off % (32 << 10) == 0 && size == nb);
    char path[4200];
    snprintf(path, sizeof path, "%s/__0_0.distcp", dir);
    size_t n = 0;
    unsigned char *file = fx_read(path, &n);
    REQUIRE(file && off >= 4096 && off + size <= n);
    size_t z = 0;
    while (z < off && file[off - 1 - z] == ZIP_PAD_BYTE) z++;
    CHECK(z >= 4096 && z < (32 << 10) + 4096); /* at least a page of it went by reference */
    CHECK(memcmp(file + off, big, nb) == 0);
    free(file);
    sck_ckpt *ck = NULL;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_verify_stats vs;
    CHECK_OK(sck_ckpt_verify(ck, &vs));
    CHECK(vs.chunks == 2 && vs.checksummed == 2);
    sck_ckpt_close(ck);
    st = sck_state_new();
    CHECK_OK(sck_state_add_replicated(st, "model.a", SCK_F32, 1, ss, small_back));
    CHECK_OK(sck_state_add_replicated(st, "model.big", SCK_F32, 2, bs, back));
    CHECK_OK(sck_load(NULL, dir, st, NULL));
    sck_state_free(st);
    CHECK(memcmp(back, big, nb) == 0 && memcmp(small_back, small, sizeof small) == 0);
    munmap(big, nb);
    free(back);
}

TEST(save_direct_io_pads_big_payloads_from_constant_memory) { save_block_aligned(SCK_SAVE_DIRECT_IO); }
TEST(save_buffered_pads_big_payloads_from_constant_memory) { save_block_aligned(0); }

/* Only the tensor record is page-aligned: the records around it keep torch's 64, so an item carries at
 * most one page of padding. */
TEST(save_zip_plan_aligns_only_the_big_record) {
    static uint8_t pay[5000];
    zip_entry e[3] = {{"data.pkl", pay, 100, 0}, {"data/0", pay, 5000, 0}, {"version", pay, 2, 0}};
    for (uint64_t fo = 0; fo < 3 * 4096; fo += 1000) {
        zip_plan p;
        REQUIRE_OK(zip_plan_build_ex(&p, e, 3, "archive", fo, 64, 1, 4096));
        CHECK((fo + p.payload_off[0]) % 64 == 0);
        CHECK((fo + p.payload_off[1]) % 4096 == 0);
        CHECK((fo + p.payload_off[2]) % 64 == 0);
        CHECK(p.payload_off[2] - (p.payload_off[1] + 5000) < 200); /* no page of padding before "version" */
        CHECK(p.payload_off[1] < 4096 + 300);
        zip_plan_free(&p);
    }
    zip_plan p;
    CHECK_ERR(zip_plan_build_ex(&p, e, 3, "archive", 0, 64, 1, 3000), SCK_ERR_INVALID_ARG, "alignment 3000 is not a power of two");
    zip_plan_free(&p);
}

/* ---- the state copy: every kind of entry survives it, and the plan's checks come from sck_wait ---- */

typedef struct kinds {
    const char *dir;
    int hole;                 /* leave a hole in "t": a coverage error */
    int rc_async[2], rc_wait[2];
    char msg[2][512];
} kinds;

static int kinds_rank(sck_comm *c, void *arg) {
    kinds *k = arg;
    int r = sck_comm_rank(c);
    static double repl[5] = {1.5, -2, 3, 4e10, 0};
    static int32_t t[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t rs[1] = {5}, ts[1] = {10}, es[2] = {0, 3};
    sck_state *st = sck_state_new();
    sck_state_add_replicated(st, "repl", SCK_F64, 1, rs, repl);
    int64_t lo = 5 * r, n = k->hole && r == 1 ? 4 : 5;
    sck_state_add_flat(st, "t", SCK_I32, 1, ts, lo, n, t + lo);
    sck_state_add_replicated(st, "empty", SCK_F32, 2, es, NULL);
    sck_state_add_blob(st, "blob", "\0raw", 4);
    sck_state_add_blob(st, "empty_blob", "", 0);
    sck_value *d = sck_value_dict();
    sck_value_dict_set(d, "lr", sck_value_float(0.5));
    sck_state_add_value(st, "cfg", d);
    sck_async *h = sck_async_new();
    k->rc_async[r] = sck_save_async(h, c, k->dir, st, NULL);
    sck_state_free(st); /* the copy must not depend on it */
    k->rc_wait[r] = sck_wait(h);
    snprintf(k->msg[r], sizeof k->msg[r], "%s", sck_last_error());
    sck_async_free(h);
    return k->rc_wait[r];
}

TEST(async_copies_every_kind_of_entry) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    kinds k = {dir, 0, {0}, {0}, {{0}}};
    CHECK_OK(sck_threads_run(2, kinds_rank, &k));
    double repl[5] = {0};
    int32_t t[10] = {0};
    float none[1];
    int64_t rs[1] = {5}, ts[1] = {10}, es[2] = {0, 3};
    sck_state *st = sck_state_new();
    sck_state_add_replicated(st, "repl", SCK_F64, 1, rs, repl);
    sck_state_add_replicated(st, "t", SCK_I32, 1, ts, t);
    sck_state_add_replicated(st, "empty", SCK_F32, 2, es, none);
    sck_state_add_blob(st, "blob", NULL, 0);
    sck_state_add_blob(st, "empty_blob", NULL, 0);
    sck_state_add_value(st, "cfg", NULL);
    REQUIRE_OK(sck_load(NULL, dir, st, NULL));
    CHECK(repl[0] == 1.5 && repl[1] == -2 && repl[3] == 4e10);
    for (int i = 0; i < 10; i++) CHECK(t[i] == i);
    const void *b;
    size_t n;
    CHECK_OK(sck_state_blob(st, "blob", &b, &n));
    CHECK(n == 4 && !memcmp(b, "\0raw", 4));
    CHECK_OK(sck_state_blob(st, "empty_blob", &b, &n));
    CHECK(n == 0);
    const sck_value *v = sck_state_value(st, "cfg");
    CHECK(v && sck_value_get_float(sck_value_dict_get(v, "lr")) == 0.5);
    CHECK(sck_state_loaded(st, "empty"));
    sck_state_free(st);
}

TEST(async_coverage_error_comes_from_wait_on_every_rank) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    kinds k = {dir, 1, {0}, {0}, {{0}}};
    sck_threads_run(2, kinds_rank, &k);
    for (int r = 0; r < 2; r++) {
        CHECK_OK(k.rc_async[r]);
        CHECK(k.rc_wait[r] == SCK_ERR_COVERAGE);
        CHECK(strstr(k.msg[r], "'t': the shards of all ranks do not cover the whole tensor") != NULL);
        CHECK(!strcmp(k.msg[r], k.msg[0]));
    }
    CHECK(fx_count_siblings(dir) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
}
