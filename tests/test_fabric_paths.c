/* test_fabric_paths.c - entry paths (planner_data) and the Fabric layout's meta.pt: saved on several
 * thread ranks, read back through every door (sck_ckpt_open with and without the model cache,
 * sck_load on other rank counts, verify), and refused where they are wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "format/torch_item.h"
#include "harness.h"

#define ROWS 6
#define COLS 4

static float W[ROWS][COLS];

/* A path value from up to 8 elements: a string, or an int written as "#<n>". */
static sck_value *path_of(const char *const *el, int n) {
    sck_value *l = sck_value_list();
    for (int i = 0; i < n; i++)
        sck_value_list_append(l, el[i][0] == '#' ? sck_value_int(atoi(el[i] + 1)) : sck_value_string(el[i]));
    return l;
}

static const char *const EXP_AVG_PATH[] = {"optimizer", "state", "fc1.weight", "exp_avg"};
static const char *const LR_PATH[] = {"optimizer", "param_groups", "#0", "lr"};

typedef struct job {
    const char *dir;
    unsigned flags;
    int step_on_rank;   /* the rank that supplies "step" (-1: every rank) */
    int bad_path_rank;  /* a rank that gives exp_avg another path (-1: none) */
} job;

/* Rank r of n: rows of model.w and optimizer.state.fc1.weight.exp_avg, plus values. */
static int save_rank(sck_comm *comm, void *arg) {
    const job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t shape[2] = {ROWS, COLS}, lo = ROWS * r / n, hi = ROWS * (r + 1) / n;
    int64_t off[2] = {lo, 0}, size[2] = {hi - lo, COLS};
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, size, &W[lo][0]);
    if (!rc) rc = sck_state_add_box(st, "optimizer.state.fc1.weight.exp_avg", SCK_F32, 2, shape, off, size, &W[lo][0]);
    if (!rc) {
        sck_value *p = path_of(EXP_AVG_PATH, 4);
        if (r == j->bad_path_rank) { /* splits the key elsewhere: ("optimizer", "state", "fc1", "weight.exp_avg") */
            sck_value_free(p);
            const char *const other[] = {"optimizer", "state", "fc1", "weight.exp_avg"};
            p = path_of(other, 4);
        }
        rc = sck_state_set_path(st, "optimizer.state.fc1.weight.exp_avg", p);
        sck_value_free(p);
    }
    if (!rc) rc = sck_state_add_value(st, "optimizer.param_groups.0.lr", sck_value_float(0.125));
    if (!rc) {
        sck_value *p = path_of(LR_PATH, 4);
        rc = sck_state_set_path(st, "optimizer.param_groups.0.lr", p);
        sck_value_free(p);
    }
    if (!rc && (j->step_on_rank < 0 || j->step_on_rank == r)) rc = sck_state_add_value(st, "step", sck_value_int(300));
    if (!rc) {
        sck_value *h = sck_value_dict();
        sck_value_dict_set(h, "name", sck_value_string("tiny"));
        sck_value_dict_set(h, "layers", sck_value_int(2));
        rc = sck_state_add_value(st, "hparams", h);
    }
    if (!rc) rc = sck_state_add_blob(st, "rng", "\x01\x02\x00\x03", 4);
    sck_save_opts o;
    memset(&o, 0, sizeof o);
    o.flags = j->flags;
    if (!rc) rc = sck_save(comm, j->dir, st, &o);
    else rc = sck_comm_agree(comm, rc);
    sck_state_free(st);
    return rc;
}

static int exists(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The path of key in ck as compact JSON (caller frees). */
static char *path_json(sck_ckpt *ck, const char *key) {
    long i = sck_ckpt_find(ck, key);
    sck_value *p = NULL;
    if (i < 0 || sck_ckpt_entry_path(ck, (size_t)i, &p)) return NULL;
    char *s = sck_value_to_json(p);
    sck_value_free(p);
    return s;
}

static void check_paths(sck_ckpt *ck) {
    char *a = path_json(ck, "optimizer.state.fc1.weight.exp_avg"), *b = path_json(ck, "optimizer.param_groups.0.lr"),
         *c = path_json(ck, "model.w");
    CHECK(a && !strcmp(a, "[\"optimizer\",\"state\",\"fc1.weight\",\"exp_avg\"]"));
    CHECK(b && !strcmp(b, "[\"optimizer\",\"param_groups\",0,\"lr\"]"));
    CHECK(c && !strcmp(c, "[\"model\",\"w\"]")); /* the default */
    free(a);
    free(b);
    free(c);
}

static void fill_w(void) {
    for (int i = 0; i < ROWS; i++)
        for (int k = 0; k < COLS; k++) W[i][k] = (float)(i * 10 + k) + 0.5f;
}

TEST(paths_survive_save_open_and_the_pickle) {
    fill_w();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    job j = {dir, 0, -1, -1};
    REQUIRE_OK(sck_threads_run(3, save_rank, &j));
    CHECK(!exists(dir, "meta.pt"));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck)); /* through .metadata.sck */
    check_paths(ck);
    char *s = path_json(ck, "step");
    CHECK(s && !strcmp(s, "[\"step\"]"));
    free(s);
    CHECK(sck_ckpt_find(ck, "step") >= 0); /* a DCP byte item without SCK_SAVE_FABRIC */
    sck_ckpt_close(ck);
    /* the same from the pickle, as torch wrote it */
    char side[4200];
    snprintf(side, sizeof side, "%s/.metadata.sck", dir);
    REQUIRE(unlink(side) == 0);
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    check_paths(ck);
    sck_verify_stats vs;
    CHECK_OK(sck_ckpt_verify(ck, &vs));
    sck_ckpt_close(ck);
}

TEST(paths_must_make_the_key_and_agree_across_ranks) {
    sck_state *st = sck_state_new();
    int64_t shape[1] = {2};
    float x[2] = {1, 2};
    REQUIRE_OK(sck_state_add_replicated(st, "a.b.c", SCK_F32, 1, shape, x));
    const char *const wrong[] = {"a", "bc"};
    const char *const neg[] = {"a", "#-1"};
    sck_value *p = path_of(wrong, 2);
    CHECK_ERR(sck_state_set_path(st, "a.b.c", p), SCK_ERR_INVALID_ARG, "joined by '.' do not make the key");
    sck_value_free(p);
    p = sck_value_list();
    CHECK_ERR(sck_state_set_path(st, "a.b.c", p), SCK_ERR_INVALID_ARG, "non-empty list");
    CHECK_ERR(sck_state_set_path(st, "nope", p), SCK_ERR_INVALID_ARG, "no such entry");
    sck_value_free(p);
    p = path_of(neg, 2);
    CHECK_ERR(sck_state_set_path(st, "a.b.c", p), SCK_ERR_INVALID_ARG, "neither a string nor a list index");
    sck_value_free(p);
    sck_state_free(st);

    fill_w();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    job j = {dir, 0, -1, 1};
    CHECK_ERR(sck_threads_run(2, save_rank, &j), SCK_ERR_MISMATCH, "give it different paths");
    CHECK(!exists(dir, ".metadata"));
}

/* Loads every entry of the checkpoint on rank r of n and checks it. */
static int load_rank(sck_comm *comm, void *arg) {
    const char *dir = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t shape[2] = {ROWS, COLS}, lo = ROWS * r / n, hi = ROWS * (r + 1) / n;
    int64_t off[2] = {lo, 0}, size[2] = {hi - lo, COLS};
    float got[ROWS][COLS];
    memset(got, 0, sizeof got);
    sck_state *st = sck_state_new();
    sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, size, &got[lo][0]);
    sck_state_add_value(st, "step", NULL);
    sck_state_add_value(st, "hparams", NULL);
    sck_state_add_value(st, "optimizer.param_groups.0.lr", NULL);
    sck_state_add_blob(st, "rng", NULL, 0);
    sck_load_opts lo_opts;
    memset(&lo_opts, 0, sizeof lo_opts);
    lo_opts.flags = SCK_LOAD_ALLOW_MISSING;
    int rc = sck_load(comm, dir, st, &lo_opts);
    int bad = rc;
    if (!rc) {
        const sck_value *step = sck_state_value(st, "step"), *h = sck_state_value(st, "hparams"),
                        *lr = sck_state_value(st, "optimizer.param_groups.0.lr");
        const void *blob = NULL;
        size_t bn = 0;
        if (!step || sck_value_get_int(step) != 300) bad = 1;
        if (!h || sck_value_get_int(sck_value_dict_get(h, "layers")) != 2) bad = 2;
        if (!lr || sck_value_get_float(lr) != 0.125) bad = 3;
        if (sck_state_blob(st, "rng", &blob, &bn) || bn != 4 || memcmp(blob, "\x01\x02\x00\x03", 4)) bad = 4;
        if (memcmp(&got[lo][0], &W[lo][0], (size_t)(hi - lo) * COLS * sizeof(float))) bad = 5;
        size_t nu = sck_state_unexpected(st, NULL); /* the exp_avg tensor was not asked for */
        if (nu != 1) bad = 6;
    }
    sck_state_free(st);
    return bad;
}

TEST(fabric_layout_writes_meta_pt_and_loads_it_on_other_rank_counts) {
    fill_w();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    job j = {dir, SCK_SAVE_FABRIC, -1, -1};
    REQUIRE_OK(sck_threads_run(2, save_rank, &j));
    CHECK(exists(dir, "meta.pt"));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    /* 2 tensors and lr in DCP, then meta.pt's hparams, rng, step (sorted) */
    REQUIRE(sck_ckpt_count(ck) == 6);
    const char *want[] = {"model.w", "optimizer.param_groups.0.lr", "optimizer.state.fc1.weight.exp_avg", "hparams", "rng", "step"};
    for (size_t i = 0; i < 6; i++) {
        sck_entry_info e;
        REQUIRE_OK(sck_ckpt_entry(ck, i, &e));
        CHECK(!strcmp(e.key, want[i]));
        CHECK(sck_ckpt_find(ck, want[i]) == (long)i);
        if (i >= 3) CHECK(e.kind == SCK_ENTRY_BYTES && !strcmp(e.file, "meta.pt") && e.nbytes > 0);
    }
    long si = sck_ckpt_find(ck, "step");
    void *raw = NULL;
    size_t n = 0;
    sck_value *v = NULL;
    REQUIRE_OK(sck_ckpt_read_bytes(ck, (size_t)si, &raw, &n, &v));
    CHECK(!raw && v && sck_value_get_int(v) == 300);
    sck_value_free(v);
    long ri = sck_ckpt_find(ck, "rng");
    REQUIRE_OK(sck_ckpt_read_bytes(ck, (size_t)ri, &raw, &n, &v));
    CHECK(v && sck_value_kind_of(v) == SCK_VAL_BYTES);
    sck_value_free(v);
    float f[1];
    int64_t z[2] = {0, 0}, one[2] = {1, 1};
    CHECK_ERR(sck_ckpt_read_box(ck, (size_t)si, z, one, f), SCK_ERR_MISMATCH, "is a value in meta.pt");
    char *s = path_json(ck, "hparams");
    CHECK(s && !strcmp(s, "[\"hparams\"]"));
    free(s);
    check_paths(ck);
    sck_verify_stats vs;
    CHECK_OK(sck_ckpt_verify(ck, &vs));
    CHECK(vs.entries == 6);
    sck_ckpt_close(ck);
    for (int nr = 1; nr <= 3; nr++) CHECK_OK(sck_threads_run(nr, load_rank, dir));
    /* saved again without the layout: replaced whole, meta.pt included */
    j.flags = 0;
    REQUIRE_OK(sck_threads_run(2, save_rank, &j));
    CHECK(!exists(dir, "meta.pt"));
    for (int nr = 1; nr <= 2; nr++) CHECK_OK(sck_threads_run(nr, load_rank, dir));
}

TEST(fabric_meta_pt_entries_come_from_rank_0) {
    fill_w();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    job j = {dir, SCK_SAVE_FABRIC, 1, -1};
    CHECK_ERR(sck_threads_run(2, save_rank, &j), SCK_ERR_INVALID_ARG, "'step': a top-level value of the Fabric layout goes to meta.pt");
    CHECK(!exists(dir, ".metadata"));
    j.step_on_rank = 0;
    CHECK_OK(sck_threads_run(2, save_rank, &j));
    CHECK_OK(sck_threads_run(2, load_rank, dir));
}

TEST(fabric_meta_pt_damage_and_collisions_are_refused) {
    fill_w();
    char dir[4096], mp[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    snprintf(mp, sizeof mp, "%s/meta.pt", dir);
    job j = {dir, SCK_SAVE_FABRIC, -1, -1};
    REQUIRE_OK(sck_threads_run(1, save_rank, &j));
    size_t n;
    unsigned char *orig = fx_read(mp, &n);
    REQUIRE(orig && n > 100);
    /* a flipped bit in data.pkl (it starts after its local header: name "meta/data.pkl", padding) */
    unsigned char *bad = malloc(n);
    memcpy(bad, orig, n);
    bad[70] ^= 0x10;
    REQUIRE(fx_write(mp, bad, n) == 0);
    sck_ckpt *ck = NULL;
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_CHECKSUM, "meta.pt: meta/data.pkl does not match its zip CRC-32");
    CHECK_ERR(sck_threads_run(2, load_rank, dir), SCK_ERR_CHECKSUM, "meta.pt");
    /* truncated */
    REQUIRE(fx_write(mp, orig, n / 2) == 0);
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_FORMAT, "meta.pt");
    /* not a regular file */
    REQUIRE(unlink(mp) == 0);
    REQUIRE(mkdir(mp, 0755) == 0);
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_FORMAT, "meta.pt: not a regular file");
    REQUIRE(rmdir(mp) == 0);
    /* a meta.pt key that .metadata holds too */
    sck_state *st = sck_state_new();
    sck_state_add_value(st, "model.w", sck_value_int(1));
    char d2[4096];
    snprintf(d2, sizeof d2, "%s/other", th_tmpdir());
    sck_save_opts o;
    memset(&o, 0, sizeof o);
    o.flags = SCK_SAVE_FABRIC;
    const char *const top[] = {"model.w"};
    sck_value *p = path_of(top, 1);
    REQUIRE_OK(sck_state_set_path(st, "model.w", p)); /* one element: a top-level key with a dot */
    sck_value_free(p);
    REQUIRE_OK(sck_save(NULL, d2, st, &o));
    sck_state_free(st);
    char mp2[4200];
    snprintf(mp2, sizeof mp2, "%s/meta.pt", d2);
    size_t n2;
    unsigned char *other = fx_read(mp2, &n2);
    REQUIRE(other);
    REQUIRE(fx_write(mp, other, n2) == 0);
    CHECK_ERR(sck_ckpt_open(dir, &ck), SCK_ERR_FORMAT, "key 'model.w' is in .metadata too");
    free(other);
    free(bad);
    free(orig);
}

/* An async save through one handle: the first with the layout, the second without, the third with it again
 * (the kept plan must follow the flag). */
static int async_rank(sck_comm *comm, void *arg) {
    const char *dir = arg;
    sck_async *a = sck_async_new();
    int rc = SCK_OK;
    for (int k = 0; k < 3 && !rc; k++) {
        sck_state *st = sck_state_new();
        int64_t shape[2] = {ROWS, COLS};
        sck_state_add_replicated(st, "model.w", SCK_F32, 2, shape, W);
        sck_state_add_value(st, "step", sck_value_int(k));
        sck_save_opts o;
        memset(&o, 0, sizeof o);
        o.flags = k == 1 ? 0 : SCK_SAVE_FABRIC;
        rc = sck_save_async(a, comm, dir, st, &o);
        sck_state_free(st);
        if (!rc) rc = sck_wait(a);
        char mp[4200];
        snprintf(mp, sizeof mp, "%s/meta.pt", dir);
        struct stat sb;
        if (!rc && (stat(mp, &sb) == 0) != (k != 1)) rc = 100 + k;
    }
    sck_async_free(a);
    return rc;
}

TEST(fabric_layout_with_async_saves) {
    fill_w();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    CHECK_OK(sck_threads_run(2, async_rank, dir));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long si = sck_ckpt_find(ck, "step");
    REQUIRE(si >= 0);
    sck_entry_info e;
    REQUIRE_OK(sck_ckpt_entry(ck, (size_t)si, &e));
    CHECK(!strcmp(e.file, "meta.pt"));
    void *raw;
    size_t n;
    sck_value *v = NULL;
    REQUIRE_OK(sck_ckpt_read_bytes(ck, (size_t)si, &raw, &n, &v));
    CHECK(v && sck_value_get_int(v) == 2);
    sck_value_free(v);
    sck_ckpt_close(ck);
}

/* Bytes go as protocol 2 writes them, _codecs.encode(latin-1 text, 'latin1'), the one form torch 2.6's
 * weights-only unpickler (torch.load's default) takes: it has no BINBYTES, and refuses builtins.bytes(). */
TEST(value_bytes_pickle_as_codecs_encode) {
    sck_value *d = sck_value_dict();
    sck_value_dict_set(d, "e", sck_value_bytes("", 0));
    sck_value_dict_set(d, "x", sck_value_bytes("\x00\x7f\x80\xff", 4));
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(ti_encode_value_pkl(&b, d));
    CHECK(memmem(b.data, b.len, "c_codecs\nencode\n", 16) != NULL);
    CHECK(memmem(b.data, b.len, "\x00\x7f\xc2\x80\xc3\xbf", 6) != NULL); /* U+0080, U+00FF in UTF-8 */
    for (size_t i = 0; i + 1 < b.len; i++) CHECK(!(b.data[i] == 'c' && !memcmp(b.data + i, "c__builtin__\nbytes", 18)));
    sck_value *back = NULL;
    REQUIRE_OK(ti_decode_value_pkl(b.data, b.len, "test", &back));
    CHECK(sck_value_equal(back, d));
    sck_value_free(back);
    sck_value_free(d);
    sck_buf_free(&b);
}
