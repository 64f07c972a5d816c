/* mpi_ckpt.c - shardckpt over MPI, one program started by tests/mpi/run.sh under mpirun -np N:
 *
 *   mpi_ckpt save DIR [CHUNK]      N ranks save a known state (boxes, flat shards, replicated, values, blob)
 *   mpi_ckpt load DIR... [CHUNK]   N ranks load each DIR with another sharding; every byte is checked
 *   mpi_ckpt errors DIR            injected failures on one rank: same status and message on every rank
 *   mpi_ckpt fabric DIR            the Fabric layout (meta.pt) and entry paths, saved and loaded over MPI
 *   mpi_ckpt comm                  the backend's collectives, with and without message splitting
 *
 * CHUNK (a number) makes the communicator split transfers into messages of at most CHUNK bytes.
 * Rank 0 prints one line per test and "N passed, N failed" last; a test passes when it passes on every rank. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <shardckpt_mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"

static int g_rank, g_size, g_pass, g_fail;

/* Every rank reports ok or not (with a detail line); the test passes only if all are ok. */
static void verdict_note(const char *name, int ok, const char *detail, const char *note) {
    if (!ok) fprintf(stderr, "rank %d: %s: %s\n", g_rank, name, detail ? detail : "failed");
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all) g_pass++;
    else g_fail++;
    if (g_rank == 0) printf("%s %s (np %d)%s%s\n", all ? "ok  " : "FAIL", name, g_size, note ? ": " : "", note ? note : "");
    fflush(stdout);
}

static void verdict(const char *name, int ok, const char *detail) { verdict_note(name, ok, detail, NULL); }

/* ------------------------------------------------------------ the known state */

enum { WR = 13, WC = 7 };          /* model.w: float32 [13, 7] */
static const int64_t FSHAPE[3] = {5, 3, 11}; /* model.flat: float64 [5, 3, 11], 165 elements */
enum { FN = 165, CR = 6, CC = 10 };  /* opt.cols: int64 [6, 10] */

static float w_at(int64_t i, int64_t j) { return (float)(i * WC + j) + 0.5f; }
static double flat_at(int64_t k) { return (double)k * 1.25 - 3.0; }
static int64_t cols_at(int64_t i, int64_t j) { return (i * CC + j) * 1000003LL - 77; }
static const int32_t REP[4] = {1, -2, 3, -4};
static const char BLOB[] = "hello from the blob";

static sck_comm *make_comm(size_t chunk) {
    sck_comm *c = chunk ? sck_comm_mpi_chunked(MPI_COMM_WORLD, chunk) : sck_comm_mpi(MPI_COMM_WORLD);
    if (!c) fprintf(stderr, "rank %d: sck_comm_mpi: %s\n", g_rank, sck_last_error());
    return c;
}

/* Save: model.w split by rows, model.flat by flat ranges, opt.cols by columns, model.rep replicated. */
static void do_save(const char *dir, size_t chunk) {
    sck_comm *c = make_comm(chunk);
    int n = g_size, r = g_rank;
    int64_t r0 = WR * r / n, r1 = WR * (r + 1) / n, f0 = FN * r / n, f1 = FN * (r + 1) / n;
    int64_t c0 = CC * r / n, c1 = CC * (r + 1) / n;
    float w[WR * WC];
    double flat[FN];
    int64_t cols[CR * CC];
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j = 0; j < WC; j++) w[(i - r0) * WC + j] = w_at(i, j);
    for (int64_t k = f0; k < f1; k++) flat[k - f0] = flat_at(k);
    for (int64_t i = 0; i < CR; i++)
        for (int64_t j = c0; j < c1; j++) cols[i * (c1 - c0) + (j - c0)] = cols_at(i, j);
    sck_state *st = sck_state_new();
    int rc = c && st ? SCK_OK : SCK_ERR_NOMEM;
    int64_t wshape[2] = {WR, WC}, woff[2] = {r0, 0}, wsz[2] = {r1 - r0, WC};
    int64_t cshape[2] = {CR, CC}, coff[2] = {0, c0}, csz[2] = {CR, c1 - c0}, rshape[1] = {4};
    if (!rc && r1 > r0) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, wshape, woff, wsz, w);
    if (!rc && f1 > f0) rc = sck_state_add_flat(st, "model.flat", SCK_F64, 3, FSHAPE, f0, f1 - f0, flat);
    if (!rc && c1 > c0) rc = sck_state_add_box(st, "opt.cols", SCK_I64, 2, cshape, coff, csz, cols);
    if (!rc) rc = sck_state_add_replicated(st, "model.rep", SCK_I32, 1, rshape, (void *)REP);
    if (!rc) rc = sck_state_add_value(st, "other.step", sck_value_int(7));
    if (!rc) rc = sck_state_add_blob(st, "other.blob", BLOB, sizeof BLOB);
    if (!rc) rc = sck_save(c, dir, st, NULL);
    char name[300];
    snprintf(name, sizeof name, "save %s%s", dir, chunk ? " (split messages)" : "");
    verdict(name, rc == SCK_OK, sck_last_error());
    sck_state_free(st);
    sck_comm_free(c);
}

/* Load with a different split: model.w by columns, model.flat as flat ranges in reverse rank order,
 * opt.cols by rows, model.rep replicated, plus the values. */
static void do_load(const char *dir, size_t chunk) {
    sck_comm *c = make_comm(chunk);
    int n = g_size, r = g_rank, q = n - 1 - r;
    int64_t c0 = WC * r / n, c1 = WC * (r + 1) / n, f0 = FN * q / n, f1 = FN * (q + 1) / n;
    int64_t r0 = CR * r / n, r1 = CR * (r + 1) / n;
    float w[WR * WC];
    double flat[FN];
    int64_t cols[CR * CC];
    int32_t rep[4] = {0};
    memset(w, 0xee, sizeof w);
    memset(flat, 0xee, sizeof flat);
    memset(cols, 0xee, sizeof cols);
    sck_state *st = sck_state_new();
    int rc = c && st ? SCK_OK : SCK_ERR_NOMEM;
    int64_t wshape[2] = {WR, WC}, woff[2] = {0, c0}, wsz[2] = {WR, c1 - c0};
    int64_t cshape[2] = {CR, CC}, coff[2] = {r0, 0}, csz[2] = {r1 - r0, CC}, rshape[1] = {4};
    if (!rc && c1 > c0) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, wshape, woff, wsz, w);
    if (!rc && f1 > f0) rc = sck_state_add_flat(st, "model.flat", SCK_F64, 3, FSHAPE, f0, f1 - f0, flat);
    if (!rc && r1 > r0) rc = sck_state_add_box(st, "opt.cols", SCK_I64, 2, cshape, coff, csz, cols);
    if (!rc) rc = sck_state_add_replicated(st, "model.rep", SCK_I32, 1, rshape, rep);
    if (!rc) rc = sck_state_add_value(st, "other.step", NULL);
    if (!rc) rc = sck_state_add_blob(st, "other.blob", NULL, 0);
    if (!rc) rc = sck_load(c, dir, st, NULL);
    char detail[1200] = "";
    if (rc) snprintf(detail, sizeof detail, "sck_load: %s", sck_last_error());
    for (int64_t i = 0; !rc && i < WR; i++)
        for (int64_t j = c0; j < c1; j++)
            if (w[i * (c1 - c0) + (j - c0)] != w_at(i, j)) rc = 1, snprintf(detail, sizeof detail, "model.w[%lld][%lld]", (long long)i, (long long)j);
    for (int64_t k = f0; !rc && k < f1; k++)
        if (flat[k - f0] != flat_at(k)) rc = 1, snprintf(detail, sizeof detail, "model.flat[%lld]", (long long)k);
    for (int64_t i = r0; !rc && i < r1; i++)
        for (int64_t j = 0; j < CC; j++)
            if (cols[(i - r0) * CC + j] != cols_at(i, j)) rc = 1, snprintf(detail, sizeof detail, "opt.cols[%lld][%lld]", (long long)i, (long long)j);
    if (!rc && memcmp(rep, REP, sizeof rep)) rc = 1, snprintf(detail, sizeof detail, "model.rep");
    if (!rc && sck_value_get_int(sck_state_value(st, "other.step")) != 7) rc = 1, snprintf(detail, sizeof detail, "other.step");
    const void *blob = NULL;
    size_t bn = 0;
    if (!rc && (sck_state_blob(st, "other.blob", &blob, &bn) || bn != sizeof BLOB || memcmp(blob, BLOB, bn)))
        rc = 1, snprintf(detail, sizeof detail, "other.blob");
    char name[300];
    snprintf(name, sizeof name, "load %s bit-exact%s", dir, chunk ? " (split messages)" : "");
    verdict(name, rc == 0, detail);
    sck_state_free(st);
    sck_comm_free(c);
}

/* ------------------------------------------------------------ error agreement */

/* rc and sck_last_error() must be identical on every rank, equal `want`, and contain `substr`. */
static void agreed(const char *name, int rc, int want, const char *substr) {
    char mine[1024], detail[1400];
    snprintf(mine, sizeof mine, "%s", sck_last_error());
    char *all = malloc((size_t)g_size * sizeof mine);
    int *rcs = malloc((size_t)g_size * sizeof *rcs);
    int ok = all && rcs;
    if (ok) {
        MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
        MPI_Allgather(&rc, 1, MPI_INT, rcs, 1, MPI_INT, MPI_COMM_WORLD);
    }
    snprintf(detail, sizeof detail, "status %s, message \"%s\"", sck_status_name(rc), mine);
    if (ok && rc != want) ok = 0, snprintf(detail, sizeof detail, "status %s, expected %s (\"%s\")", sck_status_name(rc), sck_status_name(want), mine);
    if (ok && substr && !strstr(mine, substr)) ok = 0, snprintf(detail, sizeof detail, "message \"%s\" lacks \"%s\"", mine, substr);
    for (int r = 0; ok && r < g_size; r++)
        if (rcs[r] != rc || strcmp(all + (size_t)r * sizeof mine, mine))
            ok = 0, snprintf(detail, sizeof detail, "rank %d differs: %s \"%s\" vs mine %s \"%s\"", r, sck_status_name(rcs[r]),
                             all + (size_t)r * sizeof mine, sck_status_name(rc), mine);
    free(all);
    free(rcs);
    char note[1100];
    snprintf(note, sizeof note, "%s %s", sck_status_name(rc), mine);
    verdict_note(name, ok, detail, note);
}

/* A one-tensor state: model.w rows of this rank (or `bad` variants on rank k). */
static int rows_state(sck_state *st, float *w, sck_dtype dt, int overlap) {
    int n = g_size, r = g_rank;
    int64_t r0 = WR * r / n, r1 = WR * (r + 1) / n;
    if (overlap) r0 = 0, r1 = WR * 1 / n > 0 ? WR * 1 / n : 1; /* rank k claims rank 0's rows too */
    int64_t shape[2] = {WR, WC}, off[2] = {r0, 0}, sz[2] = {r1 - r0, WC};
    for (int64_t i = 0; i < (r1 - r0) * WC; i++) w[i] = (float)i;
    return r1 > r0 ? sck_state_add_box(st, "model.w", dt, 2, shape, off, sz, w) : SCK_OK;
}

static void do_errors(const char *base) {
    sck_comm *c = make_comm(0);
    if (!c) {
        verdict("sck_comm_mpi", 0, sck_last_error());
        return;
    }
    int k = g_size - 1; /* the failing rank */
    char dir[4096], sub[4400];
    static double w[WR * WC]; /* room for any dtype */

    if (g_rank == 0) mkdir(base, 0755);
    MPI_Barrier(MPI_COMM_WORLD);

    /* 1. Rank k's disk is full: its file size limit makes its writes fail (EFBIG), whatever the layout. */
    snprintf(dir, sizeof dir, "%s/full_disk", base);
    sck_state *st = sck_state_new();
    rows_state(st, (float *)w, SCK_F32, 0);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    if (g_rank == k) {
        signal(SIGXFSZ, SIG_IGN); /* fail the write with EFBIG instead of killing the process */
        struct rlimit lim = {64, old.rlim_max};
        setrlimit(RLIMIT_FSIZE, &lim);
    }
    int rc = sck_save(c, dir, st, NULL);
    if (g_rank == k) setrlimit(RLIMIT_FSIZE, &old);
    snprintf(sub, sizeof sub, "rank %d: ", k);
    agreed("save: rank k's writes fail (file too large)", rc, SCK_ERR_IO, sub);
    snprintf(sub, sizeof sub, "__%d_0.distcp", k);
    agreed("save: the message names rank k's file", rc, SCK_ERR_IO, sub);
    agreed("save: the message gives the OS error", rc, SCK_ERR_IO, strerror(EFBIG));
    sck_state_free(st);

    /* 2. Rank k saves model.w as float64 while the others say float32. */
    if (g_size > 1) {
        snprintf(dir, sizeof dir, "%s/dtype", base);
        st = sck_state_new();
        rows_state(st, (float *)w, g_rank == k ? SCK_F64 : SCK_F32, 0);
        rc = sck_save(c, dir, st, NULL);
        agreed("save: rank k disagrees on dtype", rc, SCK_ERR_MISMATCH, "model.w");
        sck_state_free(st);

        /* 3. Rank k's box overlaps rank 0's. */
        snprintf(dir, sizeof dir, "%s/overlap", base);
        st = sck_state_new();
        rows_state(st, (float *)w, SCK_F32, g_rank == k);
        rc = sck_save(c, dir, st, NULL);
        agreed("save: rank k's box overlaps rank 0's", rc, SCK_ERR_COVERAGE, "model.w");
        sck_state_free(st);
    }

    /* A good checkpoint for the load cases. */
    snprintf(dir, sizeof dir, "%s/good", base);
    st = sck_state_new();
    rows_state(st, (float *)w, SCK_F32, 0);
    rc = sck_save(c, dir, st, NULL);
    agreed("save: good checkpoint", rc, SCK_OK, NULL);
    sck_state_free(st);

    /* 4. Rank k asks for a key the checkpoint lacks. */
    st = sck_state_new();
    rows_state(st, (float *)w, SCK_F32, 0);
    if (g_rank == k) sck_state_add_value(st, "other.not_there", NULL);
    rc = sck_load(c, dir, st, NULL);
    snprintf(sub, sizeof sub, "rank %d: ", k);
    agreed("load: rank k requests a missing key", rc, SCK_ERR_MISSING_KEY, "other.not_there");
    agreed("load: the message names rank k", rc, SCK_ERR_MISSING_KEY, sub);
    sck_state_free(st);

    /* 5. Rank k asks for model.w with a wrong global shape. */
    st = sck_state_new();
    if (g_rank == k) {
        int64_t shape[2] = {WR + 1, WC}, off[2] = {0, 0}, sz[2] = {1, WC};
        sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, sz, w);
    } else {
        rows_state(st, (float *)w, SCK_F32, 0);
    }
    rc = sck_load(c, dir, st, NULL);
    agreed("load: rank k's shape differs from the checkpoint", rc, SCK_ERR_MISMATCH, "model.w");
    sck_state_free(st);

    /* 6. Rank k's data file is truncated; only rank k reads it (each rank loads its own rows). */
    if (g_rank == 0) {
        char p[4200];
        snprintf(p, sizeof p, "%s/__%d_0.distcp", dir, k);
        if (truncate(p, 40) != 0) fprintf(stderr, "truncate %s: %s\n", p, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    st = sck_state_new();
    rows_state(st, (float *)w, SCK_F32, 0);
    rc = sck_load(c, dir, st, NULL);
    snprintf(sub, sizeof sub, "__%d_0.distcp", k);
    agreed("load: rank k's data file is truncated", rc, SCK_ERR_FORMAT, sub);
    sck_state_free(st);

    /* 7. No checkpoint at all. */
    snprintf(dir, sizeof dir, "%s/absent", base);
    st = sck_state_new();
    rows_state(st, (float *)w, SCK_F32, 0);
    rc = sck_load(c, dir, st, NULL);
    agreed("load: missing directory", rc, SCK_ERR_IO, "absent");
    sck_state_free(st);
    sck_comm_free(c);
}

/* ------------------------------------------------------------ Fabric layout and paths */

/* N ranks save model.w by rows and its Adam moment under a path torch would give it, "step" from rank 0
 * only and a learning rate under optimizer.param_groups; the same ranks load it back (rank 0 broadcasts
 * the model, the others read meta.pt themselves) and check every value and the path. */
static void do_fabric(const char *dir) {
    sck_comm *c = make_comm(0);
    static float w[WR * WC], got[WR * WC], mom[WR * WC];
    int n = g_size, r = g_rank;
    int64_t r0 = WR * r / n, r1 = WR * (r + 1) / n, shape[2] = {WR, WC}, off[2] = {r0, 0}, sz[2] = {r1 - r0, WC};
    for (int64_t i = 0; i < (r1 - r0) * WC; i++) w[i] = w_at(r0 + i / WC, i % WC), mom[i] = -w[i];
    const char *mkey = "optimizer.state.l1.weight.exp_avg";
    sck_state *st = sck_state_new();
    int rc = c ? SCK_OK : SCK_ERR_COMM;
    if (!rc && r1 > r0) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, sz, w);
    if (!rc && r1 > r0) rc = sck_state_add_box(st, mkey, SCK_F32, 2, shape, off, sz, mom);
    if (!rc && r1 > r0) {
        sck_value *p = NULL;
        const char *js = "[\"optimizer\",\"state\",\"l1.weight\",\"exp_avg\"]";
        rc = sck_value_from_json(js, strlen(js), &p);
        if (!rc) rc = sck_state_set_path(st, mkey, p);
        sck_value_free(p);
    }
    if (!rc && r == 0) rc = sck_state_add_value(st, "step", sck_value_int(1234));
    if (!rc) rc = sck_state_add_value(st, "optimizer.param_groups.0.lr", sck_value_float(0.5));
    sck_save_opts so;
    memset(&so, 0, sizeof so);
    so.flags = SCK_SAVE_FABRIC;
    if (c) { /* a rank whose state could not be built still joins the collective, and fails */
        int saved = sck_save(c, dir, st, &so);
        rc = rc ? rc : saved;
    }
    verdict("fabric: save with meta.pt", rc == SCK_OK, sck_last_error());
    sck_state_free(st);

    st = sck_state_new();
    rc = c ? SCK_OK : SCK_ERR_COMM;
    if (r1 > r0) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, sz, got);
    if (!rc) rc = sck_state_add_value(st, "step", NULL);
    if (!rc) rc = sck_state_add_value(st, "optimizer.param_groups.0.lr", NULL);
    sck_load_opts lo;
    memset(&lo, 0, sizeof lo);
    if (!rc && c) rc = sck_load(c, dir, st, &lo);
    const sck_value *step = sck_state_value(st, "step"), *lr = sck_state_value(st, "optimizer.param_groups.0.lr");
    int ok = rc == SCK_OK && step && sck_value_get_int(step) == 1234 && lr && sck_value_get_float(lr) == 0.5 &&
             !memcmp(got, w, (size_t)((r1 - r0) * WC) * sizeof *w);
    verdict("fabric: load meta.pt values and tensors on every rank", ok, rc ? sck_last_error() : "a value or row differs");
    sck_state_free(st);

    ok = 1;
    char detail[256] = "";
    if (r == 0) {
        sck_ckpt *ck = NULL;
        sck_value *p = NULL;
        long i = -1, si = -1;
        char *js = NULL;
        struct stat sb;
        char mp[4200];
        snprintf(mp, sizeof mp, "%s/meta.pt", dir);
        if (stat(mp, &sb) != 0) ok = 0, snprintf(detail, sizeof detail, "no meta.pt");
        if (ok && sck_ckpt_open(dir, &ck)) ok = 0, snprintf(detail, sizeof detail, "%s", sck_last_error());
        if (ok) i = sck_ckpt_find(ck, mkey), si = sck_ckpt_find(ck, "step");
        if (ok && (i < 0 || si < 0 || sck_ckpt_entry_path(ck, (size_t)i, &p))) ok = 0, snprintf(detail, sizeof detail, "no %s or step", mkey);
        if (ok) js = sck_value_to_json(p);
        if (ok && (!js || strcmp(js, "[\"optimizer\",\"state\",\"l1.weight\",\"exp_avg\"]"))) ok = 0, snprintf(detail, sizeof detail, "path %s", js ? js : "?");
        sck_entry_info e;
        if (ok && (sck_ckpt_entry(ck, (size_t)si, &e) || strcmp(e.file, "meta.pt"))) ok = 0, snprintf(detail, sizeof detail, "step is not in meta.pt");
        free(js);
        sck_value_free(p);
        sck_ckpt_close(ck);
    }
    verdict("fabric: the checkpoint holds step in meta.pt and the moment's path", ok, detail);
    sck_comm_free(c);
}

/* ------------------------------------------------------------ the backend itself */

static void do_comm(void) {
    const size_t chunks[] = {0, 1, 7, 64};
    for (size_t t = 0; t < sizeof chunks / sizeof *chunks; t++) {
        sck_comm *c = make_comm(chunks[t]);
        char name[200], detail[300] = "";
        int ok = c != NULL;
        /* allgatherv: rank r sends r*37 bytes (rank 0 sends none) of a rank-specific pattern. */
        size_t n = (size_t)g_rank * 37;
        unsigned char *send = malloc(n + 1), *recv = NULL;
        size_t *counts = calloc((size_t)g_size, sizeof *counts);
        for (size_t i = 0; send && i < n; i++) send[i] = (unsigned char)(g_rank * 31 + i);
        if (ok && send && counts) {
            int rc = c->ops->allgatherv(c->ctx, send, n, (void **)&recv, counts);
            if (rc) ok = 0, snprintf(detail, sizeof detail, "allgatherv: %s", sck_last_error());
            size_t off = 0;
            for (int r = 0; ok && r < g_size; r++) {
                if (counts[r] != (size_t)r * 37) ok = 0, snprintf(detail, sizeof detail, "count of rank %d", r);
                for (size_t i = 0; ok && i < counts[r]; i++)
                    if (recv[off + i] != (unsigned char)(r * 31 + i)) ok = 0, snprintf(detail, sizeof detail, "byte %zu of rank %d", i, r);
                off += counts[r];
            }
        }
        free(recv);
        snprintf(name, sizeof name, "allgatherv, messages of at most %zu bytes", chunks[t] ? chunks[t] : (size_t)INT_MAX);
        verdict(name, ok, detail);

        /* bcast of 1000 bytes from the last rank. */
        int root = g_size - 1;
        unsigned char data[1000];
        for (int i = 0; i < 1000; i++) data[i] = (unsigned char)(i * 7 + 3);
        void *buf = g_rank == root ? data : NULL;
        size_t bn = g_rank == root ? sizeof data : 0;
        ok = c != NULL;
        if (ok) {
            int rc = c->ops->bcast(c->ctx, &buf, &bn, root);
            if (rc) ok = 0, snprintf(detail, sizeof detail, "bcast: %s", sck_last_error());
            else if (bn != sizeof data || memcmp(buf, data, bn)) ok = 0, snprintf(detail, sizeof detail, "bcast data");
            if (g_rank != root && !rc) free(buf);
        }
        snprintf(name, sizeof name, "bcast, messages of at most %zu bytes", chunks[t] ? chunks[t] : (size_t)INT_MAX);
        verdict(name, ok, detail);
        free(send);
        free(counts);
        sck_comm_free(c);
    }

    /* A bad root is refused the same way everywhere, and MPI is still usable afterwards. */
    sck_comm *c = make_comm(0);
    void *buf = NULL;
    size_t bn = 0;
    int rc = c ? c->ops->bcast(c->ctx, &buf, &bn, g_size) : SCK_ERR_NOMEM;
    agreed("bcast: root out of range", rc, SCK_ERR_COMM, "is not a rank of");
    rc = c ? sck_comm_agree(c, g_rank == g_size - 1 ? sck_err(SCK_ERR_IO, "disk on fire") : SCK_OK) : SCK_ERR_NOMEM;
    char sub[64];
    snprintf(sub, sizeof sub, "rank %d: disk on fire", g_size - 1);
    agreed("sck_comm_agree over MPI", rc, SCK_ERR_IO, sub);
    sck_comm_free(c);

    /* Bad communicators are refused locally with a message. */
    sck_comm *null = sck_comm_mpi(MPI_COMM_NULL);
    verdict("sck_comm_mpi(MPI_COMM_NULL) is refused", !null && strstr(sck_last_error(), "MPI_COMM_NULL"), sck_last_error());
    /* The communicator is a duplicate: rank and size follow the given communicator (here split in two). */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
    sck_comm *h = sck_comm_mpi(half);
    int hr = -1, hs = -1;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    verdict("sck_comm_mpi on a split communicator", h && sck_comm_rank(h) == hr && sck_comm_size(h) == hs, "rank/size");
    /* mpirun here starts every rank on this machine: one node, one page cache, on every rank. */
    sck_comm *w = make_comm(0);
    verdict("sck_comm_mpi: ranks on one machine are one node", w && h && comm_one_node(w) && comm_one_node(h) && w->one_node && h->one_node,
            "one_node not set");
    sck_comm_free(w);
    sck_comm_free(h);
    MPI_Comm_free(&half);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *mode = argc > 1 ? argv[1] : "";
    /* An optional trailing number is the message limit. */
    size_t chunk = 0;
    int last = argc;
    if (argc > 3 && strspn(argv[argc - 1], "0123456789") == strlen(argv[argc - 1])) chunk = strtoul(argv[--last], NULL, 10);
    if (!strcmp(mode, "save") && last == 3) do_save(argv[2], chunk);
    else if (!strcmp(mode, "load") && last >= 3)
        for (int i = 2; i < last; i++) do_load(argv[i], chunk);
    else if (!strcmp(mode, "errors") && last == 3) do_errors(argv[2]);
    else if (!strcmp(mode, "fabric") && last == 3) do_fabric(argv[2]);
    else if (!strcmp(mode, "comm") && last == 2) do_comm();
    else {
        if (g_rank == 0) fprintf(stderr, "usage: mpi_ckpt save DIR [CHUNK] | load DIR... [CHUNK] | errors DIR | fabric DIR | comm\n");
        MPI_Finalize();
        return 2;
    }
    if (g_rank == 0) printf("%d passed, %d failed\n", g_pass, g_fail);
    MPI_Finalize();
    return g_fail != 0;
}
