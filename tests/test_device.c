/* test_device.c - tensors in device memory (sck_device_ops) on an emulated device: an arena the
 * library never touches directly (PROT_NONE outside the ops, so a stray access faults), ops that count
 * every call and byte and can be made to fail.  Checks bit-identical save/load/reshard (boxes, flat
 * ranges, replicated), files identical to host saves, async saves, the staging bound, and op
 * failures as clean errors on every rank. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "harness.h"

/* ------------------------------------------------------------------ the emulated device */

typedef struct emu {
    uint8_t *arena;
    size_t size, used;
    uint64_t d2h_calls, d2h_bytes, h2d_calls, h2d_bytes, waits, allocs;
    int64_t host_cur, host_peak;   /* host_alloc'ed bytes, now and at most */
    long fail_d2h, fail_h2d;       /* fail the call with this number (1-based; 0: none) */
    int pending_fail;              /* asynchronous failure, reported by wait */
    int async_fail;                /* failures show at wait, not at the call */
    int open;                      /* the arena stays accessible (a timing without mprotect's cost) */
} emu;

static int emu_init(emu *e, size_t size) {
    memset(e, 0, sizeof *e);
    e->size = (size + 4095) / 4096 * 4096;
    void *m = mmap(NULL, e->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    e->arena = m;
    return 0;
}

static void emu_free(emu *e) {
    if (e->arena) munmap(e->arena, e->size);
    e->arena = NULL;
}

/* A device address of n bytes (never dereferenced outside the ops). */
static void *emu_alloc(emu *e, size_t n) {
    size_t at = (e->used + 63) / 64 * 64;
    if (at + n > e->size) return NULL;
    e->used = at + n;
    return e->arena + at;
}

static void emu_open(emu *e) {
    if (!e->open) mprotect(e->arena, e->size, PROT_READ | PROT_WRITE);
}
static void emu_close(emu *e) {
    if (!e->open) mprotect(e->arena, e->size, PROT_NONE);
}

/* The test's own access to device memory (not counted). */
static void emu_put(emu *e, void *dev, const void *host, size_t n) {
    emu_open(e);
    memcpy(dev, host, n);
    emu_close(e);
}
static void emu_get(emu *e, void *host, const void *dev, size_t n) {
    emu_open(e);
    memcpy(host, dev, n);
    emu_close(e);
}

static int in_arena(const emu *e, const void *p, size_t n) {
    const uint8_t *b = p;
    return b >= e->arena && b + n <= e->arena + e->size;
}

static int fail_now(emu *e, const char *what) {
    if (e->async_fail) {
        e->pending_fail = 1;
        return SCK_OK;
    }
    return sck_err(SCK_ERR_IO, "emulated %s failure", what);
}

static int op_d2h(void *ctx, void *host, const void *dev, size_t n) {
    emu *e = ctx;
    e->d2h_calls++;
    if (!in_arena(e, dev, n) || in_arena(e, host, 1)) return sck_err(SCK_ERR_INVALID_ARG, "d2h outside the arena");
    if (e->fail_d2h && (long)e->d2h_calls == e->fail_d2h) return fail_now(e, "copy_to_host");
    e->d2h_bytes += n;
    emu_open(e);
    memcpy(host, dev, n);
    emu_close(e);
    return SCK_OK;
}

static int op_h2d(void *ctx, void *dev, const void *host, size_t n) {
    emu *e = ctx;
    e->h2d_calls++;
    if (!in_arena(e, dev, n) || in_arena(e, host, 1)) return sck_err(SCK_ERR_INVALID_ARG, "h2d outside the arena");
    if (e->fail_h2d && (long)e->h2d_calls == e->fail_h2d) return fail_now(e, "copy_to_device");
    e->h2d_bytes += n;
    emu_open(e);
    memcpy(dev, host, n);
    emu_close(e);
    return SCK_OK;
}

static int op_wait(void *ctx) {
    emu *e = ctx;
    e->waits++;
    if (e->pending_fail) {
        e->pending_fail = 0;
        return sck_err(SCK_ERR_IO, "emulated asynchronous copy failure");
    }
    return SCK_OK;
}

static void *op_host_alloc(void *ctx, size_t n) {
    emu *e = ctx;
    void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!p) return NULL;
    e->allocs++;
    e->host_cur += (int64_t)n;
    if (e->host_cur > e->host_peak) e->host_peak = e->host_cur;
    return p;
}

static void op_host_free(void *ctx, void *p, size_t n) {
    emu *e = ctx;
    e->host_cur -= (int64_t)n;
    free(p);
}

static const sck_device_ops EMU_OPS = {op_d2h, op_h2d, op_wait, op_host_alloc, op_host_free};
/* Synchronous ops without pinned memory: the library's own staging. */
static const sck_device_ops EMU_OPS_PLAIN = {op_d2h, op_h2d, NULL, NULL, NULL};

/* ------------------------------------------------------------------ the tensors */

#define NT 4
#define ROWS 600
#define COLS 700
static const char *KEYS[NT] = {"model.w", "model.b", "optimizer.m", "model.tiny"};
static const sck_dtype DT[NT] = {SCK_F32, SCK_BF16, SCK_F64, SCK_U8};
static const int64_t NUMEL[NT] = {(int64_t)ROWS * COLS, 333, 50000, 7};
static uint8_t *G[NT]; /* the global tensors */

static void make_globals(void) {
    for (int t = 0; t < NT; t++) {
        if (G[t]) continue;
        size_t n = (size_t)NUMEL[t] * sck_dtype_size(DT[t]);
        G[t] = malloc(n);
        th_fill(G[t], n, 1000 + (uint64_t)t);
    }
}

typedef struct job {
    const char *dir;
    int device;              /* pieces on the emulated device */
    int layout;              /* save: 0 row blocks; load: 1 column blocks */
    unsigned staging_mib;
    unsigned flags;
    int async;               /* 1: sck_save_async, 2: with SCK_SAVE_NO_COPY */
    const sck_device_ops *ops;
    emu emus[8];
    long fail_d2h_rank, fail_h2d_rank; /* the rank whose emu gets fail_d2h/fail_h2d below (-1: none) */
    long fail_d2h, fail_h2d;
    int async_fail;
    int mismatches;
    int rc[8];
    char msg[8][1024];
} job;

static void range_of(int64_t numel, int r, int n, int64_t *lo, int64_t *hi) {
    int64_t per = (numel + n - 1) / n;
    *lo = per * r < numel ? per * r : numel;
    *hi = per * (r + 1) < numel ? per * (r + 1) : numel;
}

/* Adds a piece: on the device (its bytes put there) or in host memory `host`. */
static void *piece_mem(job *j, int r, size_t n) {
    return j->device ? emu_alloc(&j->emus[r], n ? n : 1) : calloc(n ? n : 1, 1);
}

static int save_rank(sck_comm *comm, void *arg) {
    job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm), rc = SCK_OK;
    emu *e = &j->emus[r];
    sck_state *st = sck_state_new();
    void *host[NT] = {0};
    if (j->device) {
        emu_init(e, 16u << 20);
        if (r == j->fail_d2h_rank) e->fail_d2h = j->fail_d2h;
        e->async_fail = j->async_fail;
        rc = sck_state_set_device(st, j->ops, e);
    }
    int64_t shape_w[2] = {ROWS, COLS};
    /* w: row blocks */
    int64_t lo, hi;
    range_of(ROWS, r, n, &lo, &hi);
    size_t nb = (size_t)(hi - lo) * COLS * 4;
    void *d = piece_mem(j, r, nb);
    if (j->device) emu_put(e, d, G[0] + (size_t)lo * COLS * 4, nb);
    else memcpy(d, G[0] + (size_t)lo * COLS * 4, nb), host[0] = d;
    int64_t off[2] = {lo, 0}, sz[2] = {hi - lo, COLS};
    if (!rc) rc = j->device ? sck_state_add_device_box(st, KEYS[0], DT[0], 2, shape_w, off, sz, d)
                            : sck_state_add_box(st, KEYS[0], DT[0], 2, shape_w, off, sz, d);
    /* b and m: flat ranges */
    for (int t = 1; t <= 2 && !rc; t++) {
        size_t el = sck_dtype_size(DT[t]);
        range_of(NUMEL[t], r, n, &lo, &hi);
        d = piece_mem(j, r, (size_t)(hi - lo) * el);
        if (j->device) emu_put(e, d, G[t] + lo * (int64_t)el, (size_t)(hi - lo) * el);
        else memcpy(d, G[t] + lo * (int64_t)el, (size_t)(hi - lo) * el), host[t] = d;
        int64_t shp = NUMEL[t];
        rc = j->device ? sck_state_add_device_flat(st, KEYS[t], DT[t], 1, &shp, lo, hi - lo, d)
                       : sck_state_add_flat(st, KEYS[t], DT[t], 1, &shp, lo, hi - lo, d);
    }
    /* tiny: replicated */
    d = piece_mem(j, r, 7);
    if (j->device) emu_put(e, d, G[3], 7);
    else memcpy(d, G[3], 7), host[3] = d;
    int64_t shp = 7;
    if (!rc) rc = j->device ? sck_state_add_device_replicated(st, KEYS[3], DT[3], 1, &shp, d)
                            : sck_state_add_replicated(st, KEYS[3], DT[3], 1, &shp, d);
    if (!rc) rc = sck_state_add_value(st, "step", sck_value_int(42));
    sck_save_opts o;
    memset(&o, 0, sizeof o);
    o.staging_mib = j->staging_mib;
    o.flags = j->flags;
    if (rc) {
        rc = sck_comm_agree(comm, rc);
    } else if (j->async) {
        sck_async *a = sck_async_new();
        if (j->async == 2) o.flags |= SCK_SAVE_NO_COPY;
        rc = sck_save_async(a, comm, j->dir, st, &o);
        if (!rc && j->async == 1 && j->device) { /* the snapshot is taken: the device may change */
            void *junk = calloc(nb ? nb : 1, 1);
            sck_state_free(st);
            st = NULL;
            emu_put(e, e->arena, junk, nb < e->used ? nb : e->used);
            free(junk);
        }
        int w = sck_wait(a);
        if (!rc) rc = w;
        sck_async_free(a);
    } else {
        rc = sck_save(comm, j->dir, st, &o);
    }
    j->rc[r] = rc;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", sck_last_error());
    sck_state_free(st);
    for (int t = 0; t < NT; t++) free(host[t]);
    return SCK_OK;
}

/* Loads column blocks of w, other flat ranges of b and m, and tiny, then compares with G. */
static int load_rank(sck_comm *comm, void *arg) {
    job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm), rc = SCK_OK;
    emu *e = &j->emus[r];
    sck_state *st = sck_state_new();
    void *mem[NT];
    size_t len[NT];
    int64_t lo[NT], hi[NT];
    if (j->device) {
        emu_init(e, 16u << 20);
        if (r == j->fail_h2d_rank) e->fail_h2d = j->fail_h2d;
        e->async_fail = j->async_fail;
        rc = sck_state_set_device(st, j->ops, e);
    }
    int64_t shape_w[2] = {ROWS, COLS};
    range_of(COLS, r, n, &lo[0], &hi[0]);
    len[0] = (size_t)(hi[0] - lo[0]) * ROWS * 4;
    mem[0] = piece_mem(j, r, len[0]);
    int64_t off[2] = {0, lo[0]}, sz[2] = {ROWS, hi[0] - lo[0]};
    if (!rc) rc = j->device ? sck_state_add_device_box(st, KEYS[0], DT[0], 2, shape_w, off, sz, mem[0])
                            : sck_state_add_box(st, KEYS[0], DT[0], 2, shape_w, off, sz, mem[0]);
    for (int t = 1; t <= 2 && !rc; t++) {
        size_t el = sck_dtype_size(DT[t]);
        range_of(NUMEL[t], n - 1 - r, n, &lo[t], &hi[t]); /* other ranges than any save */
        len[t] = (size_t)(hi[t] - lo[t]) * el;
        mem[t] = piece_mem(j, r, len[t]);
        int64_t shp = NUMEL[t];
        rc = j->device ? sck_state_add_device_flat(st, KEYS[t], DT[t], 1, &shp, lo[t], hi[t] - lo[t], mem[t])
                       : sck_state_add_flat(st, KEYS[t], DT[t], 1, &shp, lo[t], hi[t] - lo[t], mem[t]);
    }
    len[3] = 7;
    mem[3] = piece_mem(j, r, 7);
    int64_t shp = 7;
    if (!rc) rc = j->device ? sck_state_add_device_replicated(st, KEYS[3], DT[3], 1, &shp, mem[3])
                            : sck_state_add_replicated(st, KEYS[3], DT[3], 1, &shp, mem[3]);
    if (!rc) rc = sck_state_add_value(st, "step", NULL);
    sck_load_opts o;
    memset(&o, 0, sizeof o);
    o.staging_mib = j->staging_mib;
    rc = rc ? sck_comm_agree(comm, rc) : sck_load(comm, j->dir, st, &o);
    j->rc[r] = rc;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", sck_last_error());
    for (int t = 0; t < NT && !rc; t++) {
        uint8_t *got = malloc(len[t] ? len[t] : 1);
        if (j->device) emu_get(e, got, mem[t], len[t]);
        else memcpy(got, mem[t], len[t]);
        if (t == 0) {
            for (int64_t row = 0; row < ROWS; row++)
                if (memcmp(got + (size_t)row * (size_t)(hi[0] - lo[0]) * 4, G[0] + ((size_t)row * COLS + (size_t)lo[0]) * 4,
                           (size_t)(hi[0] - lo[0]) * 4)) {
                    __atomic_fetch_add(&j->mismatches, 1, __ATOMIC_RELAXED);
                    break;
                }
        } else if (t == 3) {
            if (memcmp(got, G[3], 7)) __atomic_fetch_add(&j->mismatches, 1, __ATOMIC_RELAXED);
        } else if (memcmp(got, G[t] + lo[t] * (int64_t)sck_dtype_size(DT[t]), len[t])) {
            __atomic_fetch_add(&j->mismatches, 1, __ATOMIC_RELAXED);
        }
        free(got);
    }
    const sck_value *v = rc ? NULL : sck_state_value(st, "step");
    if (!rc && (!v || sck_value_get_int(v) != 42)) __atomic_fetch_add(&j->mismatches, 1, __ATOMIC_RELAXED);
    sck_state_free(st);
    if (!j->device)
        for (int t = 0; t < NT; t++) free(mem[t]);
    return SCK_OK;
}

static void job_init(job *j, const char *dir, int device) {
    memset(j, 0, sizeof *j);
    j->dir = dir;
    j->device = device;
    j->staging_mib = 1;
    j->ops = &EMU_OPS;
    j->fail_d2h_rank = j->fail_h2d_rank = -1;
}

static void job_done(job *j) {
    for (int r = 0; r < 8; r++) emu_free(&j->emus[r]);
}

static int run_save(job *j, int nranks) {
    int rc = sck_threads_run(nranks, save_rank, j);
    for (int r = 0; !rc && r < nranks; r++) rc = j->rc[r];
    return rc;
}

static int run_load(job *j, int nranks) {
    for (int r = 0; r < 8; r++) emu_free(&j->emus[r]);
    j->mismatches = 0;
    int rc = sck_threads_run(nranks, load_rank, j);
    for (int r = 0; !rc && r < nranks; r++) rc = j->rc[r];
    return rc;
}

static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) eq = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static char *path2(const char *base, const char *name) {
    static char buf[4][8192];
    static int k;
    k = (k + 1) % 4;
    size_t a = strlen(base), b = strlen(name);
    if (a + b + 2 > sizeof buf[k]) return buf[k];
    memcpy(buf[k], base, a);
    buf[k][a] = '/';
    memcpy(buf[k] + a + 1, name, b + 1);
    return buf[k];
}

/* ------------------------------------------------------------------ tests */

/* One rank: device save == host save, byte for byte; loads back bit-identical into the device and
 * into host memory; every byte crosses the ops once; staging stays within 2 x staging_mib. */
TEST(device_save_load_one_rank) {
    make_globals();
    const char *tmp = th_tmpdir();
    char hdir[4096], ddir[4096];
    snprintf(hdir, sizeof hdir, "%s/host", tmp);
    snprintf(ddir, sizeof ddir, "%s/dev", tmp);
    job jh, jd;
    job_init(&jh, hdir, 0);
    job_init(&jd, ddir, 1);
    REQUIRE_OK(run_save(&jh, 1));
    REQUIRE_OK(run_save(&jd, 1));
    uint64_t total = 0;
    for (int t = 0; t < NT; t++) total += (uint64_t)NUMEL[t] * sck_dtype_size(DT[t]);
    const emu *e = &jd.emus[0];
    CHECK(e->d2h_bytes == total);
    CHECK(e->h2d_calls == 0);
    CHECK(e->host_peak > 0 && e->host_peak <= 2 * (1 << 20) + 8192);
    CHECK(e->host_cur == 0);
    printf("  device save, 1 rank: %llu d2h calls, %llu bytes, %llu waits, staging peak %lld bytes (staging_mib 1)\n",
           (unsigned long long)e->d2h_calls, (unsigned long long)e->d2h_bytes, (unsigned long long)e->waits, (long long)e->host_peak);
    CHECK(files_equal(path2(hdir, "__0_0.distcp"), path2(ddir, "__0_0.distcp")));
    CHECK(files_equal(path2(hdir, ".metadata"), path2(ddir, ".metadata")));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(ddir, &ck));
    CHECK_OK(sck_ckpt_verify(ck, NULL));
    sck_ckpt_close(ck);
    job jl;
    job_init(&jl, ddir, 1);
    REQUIRE_OK(run_load(&jl, 1));
    CHECK(jl.mismatches == 0);
    CHECK(jl.emus[0].h2d_bytes == total);
    CHECK(jl.emus[0].d2h_calls == 0);
    CHECK(jl.emus[0].host_peak <= 2 * (1 << 20) + 8192 && jl.emus[0].host_cur == 0);
    printf("  device load, 1 rank: %llu h2d calls, %llu bytes, %llu waits, staging peak %lld bytes\n",
           (unsigned long long)jl.emus[0].h2d_calls, (unsigned long long)jl.emus[0].h2d_bytes, (unsigned long long)jl.emus[0].waits,
           (long long)jl.emus[0].host_peak);
    job_done(&jl);
    job_init(&jl, hdir, 0); /* the host load of the device save's twin */
    REQUIRE_OK(run_load(&jl, 1));
    CHECK(jl.mismatches == 0);
    job_done(&jh);
    job_done(&jd);
}

/* 2 ranks save row blocks from the device, 3 (and 1) load columns and other flat ranges into it;
 * the device files equal the host ones; also with O_DIRECT and with synchronous ops and no pinned memory. */
TEST(device_reshard_threads) {
    make_globals();
    const char *tmp = th_tmpdir();
    for (int mode = 0; mode < 3; mode++) {
        char hdir[4096], ddir[4096];
        snprintf(hdir, sizeof hdir, "%s/host%d", tmp, mode);
        snprintf(ddir, sizeof ddir, "%s/dev%d", tmp, mode);
        job jh, jd;
        job_init(&jh, hdir, 0);
        job_init(&jd, ddir, 1);
        if (mode == 1) jh.flags = jd.flags = SCK_SAVE_DIRECT_IO;
        if (mode == 2) jd.ops = &EMU_OPS_PLAIN;
        REQUIRE_OK(run_save(&jh, 2));
        REQUIRE_OK(run_save(&jd, 2));
        for (int r = 0; r < 2; r++) /* the staging bound: 2 x staging_mib, pinned, per rank */
            CHECK(jd.emus[r].host_peak <= 2 * (1 << 20) + 8192 && jd.emus[r].host_cur == 0 && (mode == 2) == (jd.emus[r].allocs == 0));
        for (int r = 0; r < 2; r++) {
            char name[64];
            snprintf(name, sizeof name, "__%d_0.distcp", r);
            CHECK(files_equal(path2(hdir, name), path2(ddir, name)));
        }
        for (int nl = 1; nl <= 3; nl += 2) {
            job jl;
            job_init(&jl, ddir, 1);
            if (mode == 2) jl.ops = &EMU_OPS_PLAIN;
            REQUIRE_OK(run_load(&jl, nl));
            CHECK(jl.mismatches == 0);
            for (int r = 0; r < nl; r++)
                CHECK(jl.emus[r].d2h_calls == 0 && jl.emus[r].host_cur == 0 && jl.emus[r].host_peak <= 2 * (1 << 20) + 8192);
            job_done(&jl);
        }
        job_done(&jh);
        job_done(&jd);
    }
}

/* Async saves: the snapshot goes to pinned host memory (from host_alloc), so the device may change
 * once sck_save_async returns; with SCK_SAVE_NO_COPY the background writer streams from the device. */
TEST(device_async_save) {
    make_globals();
    const char *tmp = th_tmpdir();
    for (int mode = 1; mode <= 2; mode++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/a%d", tmp, mode);
        job jd;
        job_init(&jd, dir, 1);
        jd.async = mode;
        REQUIRE_OK(run_save(&jd, 2));
        if (mode == 1) CHECK(jd.emus[0].host_peak > 0 && jd.emus[0].host_cur == 0); /* the snapshot, freed with the handle */
        if (mode == 2) CHECK(jd.emus[0].host_peak <= 2 * (1 << 20) + 8192); /* streamed: only the staging */
        job jl;
        job_init(&jl, dir, 1);
        REQUIRE_OK(run_load(&jl, 3));
        CHECK(jl.mismatches == 0);
        job_done(&jl);
        job_done(&jd);
    }
}

/* A failing op on one rank is a clean error on every rank, naming the tensor and the offset; the
 * checkpoint is not published.  Synchronous failures and ones reported by wait. */
TEST(device_op_failures) {
    make_globals();
    const char *tmp = th_tmpdir();
    for (int async_fail = 0; async_fail < 2; async_fail++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/f%d", tmp, async_fail);
        job jd;
        job_init(&jd, dir, 1);
        jd.fail_d2h_rank = 1;
        jd.fail_d2h = 2;
        jd.async_fail = async_fail;
        int rc = run_save(&jd, 2);
        CHECK(rc == SCK_ERR_IO);
        for (int r = 0; r < 2; r++) {
            CHECK(jd.rc[r] == SCK_ERR_IO);
            if (getenv("SCK_DEV_MSG")) printf("  save msg: %s\n", jd.msg[r]);
            CHECK(strstr(jd.msg[r], "rank 1: 'model.") && strstr(jd.msg[r], "byte offset"));
            CHECK(strstr(jd.msg[r], "emulated"));
        }
        FILE *f = fopen(path2(dir, ".metadata"), "rb");
        CHECK(f == NULL); /* nothing published */
        if (f) fclose(f);
        job_done(&jd);
        /* a good save, then a load whose copy to the device fails on rank 0 */
        job_init(&jd, dir, 1);
        REQUIRE_OK(run_save(&jd, 2));
        job jl;
        job_init(&jl, dir, 1);
        jl.fail_h2d_rank = 0;
        jl.fail_h2d = 1;
        jl.async_fail = async_fail;
        rc = run_load(&jl, 2);
        CHECK(rc == SCK_ERR_IO);
        for (int r = 0; r < 2; r++) {
            CHECK(jl.rc[r] == SCK_ERR_IO);
            if (getenv("SCK_DEV_MSG")) printf("  load msg: %s\n", jl.msg[r]);
            CHECK(strstr(jl.msg[r], "rank 0") && strstr(jl.msg[r], "copy to device") && strstr(jl.msg[r], "emulated"));
            CHECK(strstr(jl.msg[r], "'model.w'") && strstr(jl.msg[r], "byte offset 0"));
        }
        job_done(&jl);
        job_done(&jd);
    }
}

/* Argument checks of the device API. */
TEST(device_api_args) {
    sck_state *st = sck_state_new();
    int64_t shp = 4, off = 0, sz = 4;
    char x[16];
    CHECK_ERR(sck_state_add_device_box(st, "t", SCK_F32, 1, &shp, &off, &sz, x), SCK_ERR_INVALID_ARG, "sck_state_set_device first");
    sck_device_ops bad = {op_d2h, NULL, NULL, NULL, NULL};
    CHECK_ERR(sck_state_set_device(st, &bad, NULL), SCK_ERR_INVALID_ARG, "required");
    sck_device_ops bad2 = {op_d2h, op_h2d, NULL, op_host_alloc, NULL};
    CHECK_ERR(sck_state_set_device(st, &bad2, NULL), SCK_ERR_INVALID_ARG, "host_free");
    emu e;
    REQUIRE(emu_init(&e, 4096) == 0);
    CHECK_OK(sck_state_set_device(st, &EMU_OPS, &e));
    CHECK_OK(sck_state_add_device_box(st, "t", SCK_F32, 1, &shp, &off, &sz, emu_alloc(&e, 16)));
    CHECK_ERR(sck_state_set_device(st, &EMU_OPS_PLAIN, &e), SCK_ERR_INVALID_ARG, "other ops");
    sck_full_opts fo;
    memset(&fo, 0, sizeof fo);
    char p[4096];
    snprintf(p, sizeof p, "%s/x.safetensors", th_tmpdir());
    CHECK_ERR(sck_save_full(NULL, p, st, &fo), SCK_ERR_UNSUPPORTED, "device pieces");
    sck_state_free(st);
    emu_free(&e);
}

/* Throughput of one rank's save of 32 MiB: from the emulated device (copy through staging, then
 * write; its arena left accessible, so that mprotect's cost is not counted) and from host memory
 * (written straight from the buffer), both without fsync, to the page cache; best of 5 (a shared machine is noisy). */
TEST(device_save_throughput) {
    const size_t n = 32u << 20;
    const char *tmp = th_tmpdir();
    uint8_t *h = malloc(n);
    REQUIRE(h);
    th_fill(h, n, 7);
    emu e;
    REQUIRE(emu_init(&e, n + 4096) == 0);
    void *d = emu_alloc(&e, n);
    emu_put(&e, d, h, n);
    emu_open(&e);
    e.open = 1;
    int64_t shp = (int64_t)(n / 4), off = 0;
    double secs[2] = {0, 0};
    for (int dev = 0; dev < 2; dev++) {
        sck_state *st = sck_state_new();
        if (dev) CHECK_OK(sck_state_set_device(st, &EMU_OPS, &e));
        CHECK_OK(dev ? sck_state_add_device_box(st, "big", SCK_F32, 1, &shp, &off, &shp, d)
                     : sck_state_add_box(st, "big", SCK_F32, 1, &shp, &off, &shp, h));
        sck_save_opts o;
        memset(&o, 0, sizeof o);
        o.flags = SCK_SAVE_NO_FSYNC;
        o.staging_mib = 8;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/t%d", tmp, dev);
        for (int rep = 0; rep < 5; rep++) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            CHECK_OK(sck_save(NULL, dir, st, &o));
            clock_gettime(CLOCK_MONOTONIC, &b);
            double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
            if (rep == 0 || s < secs[dev]) secs[dev] = s;
        }
        sck_state_free(st);
    }
    printf("  save of 32 MiB, no fsync, best of 5: host %.0f MB/s, emulated device (D2H via staging_mib 8 + write) %.0f MB/s\n",
           (double)n / secs[0] / 1e6, (double)n / secs[1] / 1e6);
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/t0/__0_0.distcp", tmp);
    snprintf(b, sizeof b, "%s/t1/__0_0.distcp", tmp);
    CHECK(files_equal(a, b));
    emu_free(&e);
    free(h);
}
