/* test_item_bytes.c - sck_state_add_item_bytes: bytes stored as the item itself (torch's
 * StorageWriter hands over ready torch.save archives), on every save path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCK_ADVANCED_API
#include "ckpt_fixture.h"
#include "harness.h"
#include "shardckpt_advanced.h"

#define ROWS 6
#define COLS 5
static float W[ROWS][COLS];

/* A copy of the item of `key` in checkpoint dir (opened as ck), cut out of its data file at its recorded
 * place; *n receives its length.  NULL if it cannot be read. */
static unsigned char *item_copy(const char *dir, sck_ckpt *ck, const char *key, size_t *n) {
    sck_chunk_info ci;
    long i = sck_ckpt_find(ck, key);
    if (i < 0 || sck_ckpt_chunk(ck, (size_t)i, 0, &ci)) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ci.file);
    size_t len;
    unsigned char *all = fx_read(path, &len), *out = NULL;
    if (all && ci.offset + ci.length <= len && (out = malloc(ci.length ? ci.length : 1))) {
        memcpy(out, all + ci.offset, ci.length);
        *n = ci.length;
    }
    free(all);
    return out;
}

/* A torch.save archive of `v`, as the library writes one for a value: saved into this test's
 * directory, then cut out of the data file. */
static unsigned char *archive_of(sck_value *v, size_t *n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/arch", th_tmpdir());
    sck_state *st = sck_state_new();
    sck_comm *c = sck_comm_single();
    unsigned char *out = NULL;
    sck_ckpt *ck = NULL;
    if (!sck_state_add_value(st, "v", v) && !sck_save(c, dir, st, NULL) && !sck_ckpt_open(dir, &ck))
        out = item_copy(dir, ck, "v", n);
    sck_ckpt_close(ck);
    sck_comm_free(c);
    sck_state_free(st);
    return out;
}

static sck_value *hparams(void) {
    sck_value *d = sck_value_dict(), *b = sck_value_list();
    sck_value_list_append(b, sck_value_float(0.9));
    sck_value_list_append(b, sck_value_float(0.999));
    sck_value_dict_set(d, "lr", sck_value_float(0.25));
    sck_value_dict_set(d, "betas", b);
    return d;
}

typedef struct job {
    const char *dir;
    const unsigned char *arch;
    size_t arch_n;
    unsigned flags;
    int async;
} job;

static const char RAW[] = "not an archive: plain bytes";

static int save_rank(sck_comm *comm, void *arg) {
    const job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t shape[2] = {ROWS, COLS}, lo = ROWS * r / n, hi = ROWS * (r + 1) / n;
    int64_t off[2] = {lo, 0}, size[2] = {hi - lo, COLS};
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, size, &W[lo][0]);
    /* Every rank holds the archive, as torch's planner gives replicated items to each (before dedup). */
    if (!rc) rc = sck_state_add_item_bytes(st, "optimizer.hp", j->arch, j->arch_n);
    if (!rc) rc = sck_state_add_item_bytes(st, "hp", j->arch, j->arch_n); /* top-level: stays out of meta.pt */
    if (!rc && r == n - 1) rc = sck_state_add_item_bytes(st, "raw", RAW, sizeof RAW - 1);
    if (!rc) rc = sck_state_add_blob(st, "rng", "\x01\x02", 2);
    sck_save_opts o;
    memset(&o, 0, sizeof o);
    o.flags = j->flags;
    if (rc) rc = sck_comm_agree(comm, rc);
    else if (!j->async) rc = sck_save(comm, j->dir, st, &o);
    else {
        sck_async *a = sck_async_new();
        rc = a ? sck_save_async(a, comm, j->dir, st, &o) : SCK_ERR_NOMEM;
        if (!rc) rc = sck_wait(a);
        sck_async_free(a);
    }
    sck_state_free(st);
    return rc;
}

/* The item of `key` in dir is exactly want[0, n). */
static int item_is(const char *dir, sck_ckpt *ck, const char *key, const void *want, size_t n) {
    size_t got_n = 0;
    unsigned char *got = item_copy(dir, ck, key, &got_n);
    int same = got && got_n == n && !memcmp(got, want, n);
    free(got);
    return same;
}

static void check_saved(const char *dir, const unsigned char *arch, size_t arch_n, const sck_value *want, int fabric) {
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK(item_is(dir, ck, "optimizer.hp", arch, arch_n));
    CHECK(item_is(dir, ck, "hp", arch, arch_n));
    CHECK(item_is(dir, ck, "raw", RAW, sizeof RAW - 1));
    void *data = NULL;
    size_t n = 0;
    sck_value *v = NULL;
    CHECK_OK(sck_ckpt_read_bytes(ck, (size_t)sck_ckpt_find(ck, "optimizer.hp"), &data, &n, &v));
    CHECK(!data && v && sck_value_equal(v, want));
    sck_value_free(v);
    v = NULL;
    CHECK_OK(sck_ckpt_read_bytes(ck, (size_t)sck_ckpt_find(ck, "raw"), &data, &n, &v));
    CHECK(!v && data && n == sizeof RAW - 1 && !memcmp(data, RAW, n));
    free(data);
    sck_verify_stats vs;
    CHECK_OK(sck_ckpt_verify(ck, &vs));
    CHECK(vs.checksummed + (unsigned)fabric == vs.chunks); /* the verbatim items' CRC-32Cs are recorded too; meta.pt's "rng" has none */
    sck_ckpt_close(ck);

    /* sck_load decodes them as values, on a rank count other than the save's. */
    sck_state *st = sck_state_new();
    float got[ROWS][COLS];
    int64_t shape[2] = {ROWS, COLS}, off[2] = {0, 0};
    sck_comm *c = sck_comm_single();
    REQUIRE_OK(sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, shape, &got[0][0]));
    REQUIRE_OK(sck_state_add_value(st, "optimizer.hp", NULL));
    REQUIRE_OK(sck_state_add_value(st, "hp", NULL));
    REQUIRE_OK(sck_state_add_blob(st, "raw", NULL, 0));
    REQUIRE_OK(sck_state_add_blob(st, "rng", NULL, 0));
    CHECK_OK(sck_load(c, dir, st, NULL));
    CHECK(!memcmp(got, W, sizeof W));
    CHECK(sck_value_equal(sck_state_value(st, "optimizer.hp"), want));
    CHECK(sck_value_equal(sck_state_value(st, "hp"), want));
    const void *b;
    CHECK_OK(sck_state_blob(st, "raw", &b, &n));
    CHECK(n == sizeof RAW - 1 && !memcmp(b, RAW, n));
    sck_state_free(st);
    sck_comm_free(c);
}

TEST(item_bytes_are_stored_verbatim_and_load_as_values) {
    th_fill(W, sizeof W, 41);
    char d[4096];
    size_t arch_n = 0;
    unsigned char *arch = archive_of(hparams(), &arch_n);
    REQUIRE(arch && arch_n > 22 && !memcmp(arch, "PK\x03\x04", 4));
    sck_value *want = hparams();
    /* 1, 2 and 3 thread ranks; sync and async; the Fabric layout keeps them DCP items. */
    for (int ranks = 1; ranks <= 3; ranks++)
        for (int mode = 0; mode < 3; mode++) {
            snprintf(d, sizeof d, "%s/ck%d_%d", th_tmpdir(), ranks, mode);
            job j = {d, arch, arch_n, mode == 2 ? SCK_SAVE_FABRIC : 0, mode == 1};
            CHECK_OK(sck_threads_run(ranks, save_rank, &j));
            check_saved(d, arch, arch_n, want, mode == 2);
            if (mode == 2) { /* meta.pt holds the blob "rng" but not the verbatim "hp" */
                sck_ckpt *ck;
                REQUIRE_OK(sck_ckpt_open(d, &ck));
                sck_entry_info hp, rng;
                CHECK_OK(sck_ckpt_entry(ck, (size_t)sck_ckpt_find(ck, "hp"), &hp));
                CHECK_OK(sck_ckpt_entry(ck, (size_t)sck_ckpt_find(ck, "rng"), &rng));
                CHECK(hp.file && strstr(hp.file, ".distcp"));
                CHECK(rng.file && !strcmp(rng.file, "meta.pt"));
                sck_ckpt_close(ck);
            }
        }
    /* A flipped byte inside the verbatim archive is caught by its CRC-32C. */
    snprintf(d, sizeof d, "%s/ck2_0", th_tmpdir());
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(d, &ck));
    sck_chunk_info ci;
    REQUIRE_OK(sck_ckpt_chunk(ck, (size_t)sck_ckpt_find(ck, "optimizer.hp"), 0, &ci));
    char file[256];
    snprintf(file, sizeof file, "%s", ci.file);
    sck_ckpt_close(ck);
    REQUIRE(fx_flip(d, file, ci.offset + ci.length / 2, 0x10) == 0);
    REQUIRE_OK(sck_ckpt_open(d, &ck));
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_CHECKSUM, "optimizer.hp");
    sck_ckpt_close(ck);
    sck_value_free(want);
    free(arch);
}

TEST(item_bytes_in_a_full_save_store_their_value) {
    th_fill(W, sizeof W, 42);
    char p[4096];
    size_t arch_n = 0;
    unsigned char *arch = archive_of(hparams(), &arch_n);
    REQUIRE(arch);
    snprintf(p, sizeof p, "%s/full.safetensors", th_tmpdir());
    int64_t shape[2] = {ROWS, COLS}, off[2] = {0, 0};
    sck_state *st = sck_state_new();
    REQUIRE_OK(sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, shape, &W[0][0]));
    REQUIRE_OK(sck_state_add_item_bytes(st, "hp", arch, arch_n));
    CHECK_OK(sck_save_full(NULL, p, st, NULL));
    sck_value *vals = NULL, *want = hparams();
    REQUIRE_OK(sck_safetensors_values(p, &vals));
    CHECK(sck_value_equal(sck_value_dict_get(vals, "hp"), want));
    sck_value_free(vals);
    /* Bytes that are no torch.save archive have no value to store there. */
    REQUIRE_OK(sck_state_add_item_bytes(st, "raw", RAW, sizeof RAW - 1));
    CHECK_ERR(sck_save_full(NULL, p, st, NULL), SCK_ERR_FORMAT, "raw");
    sck_state_free(st);
    sck_value_free(want);
    free(arch);
}

TEST(item_bytes_arguments_are_checked) {
    sck_state *st = sck_state_new();
    CHECK_ERR(sck_state_add_item_bytes(st, "k", NULL, 4), SCK_ERR_INVALID_ARG, "k: an item of 4 bytes");
    CHECK_ERR(sck_state_add_item_bytes(st, "k", "x", 0), SCK_ERR_INVALID_ARG, "an item needs bytes");
    CHECK_OK(sck_state_add_item_bytes(st, "k", "xy", 2));
    CHECK_ERR(sck_state_add_item_bytes(st, "k", "xy", 2), SCK_ERR_INVALID_ARG, "duplicate key");
    CHECK_ERR(sck_state_add_blob(st, "k", "xy", 2), SCK_ERR_INVALID_ARG, "duplicate key");
    CHECK(sck_state_count(st) == 1);
    sck_state_free(st);
}
