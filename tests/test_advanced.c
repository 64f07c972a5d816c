/* test_advanced.c - the advanced tier (include/shardckpt_advanced.h) through its own declarations only, as a
 * program outside the library uses it: the streaming safetensors / HF writer, flat reads, __metadata__
 * values, key selection, sizes, pickle descriptions and torch.save files. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SCK_ADVANCED_API
#include "harness.h"
#include "shardckpt_advanced.h"

/* dir/name in one of 4 rotating buffers (dir may be an earlier result). */
static const char *tjoin(const char *dir, const char *name) {
    static char p[4][4096];
    static int k;
    char d[2048];
    snprintf(d, sizeof d, "%s", dir);
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", d, name);
    return p[k];
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Files in dir whose name ends in `suffix`. */
static int count_suffix(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    size_t ls = strlen(suffix);
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l >= ls && !strcmp(de->d_name + l - ls, suffix);
    }
    closedir(d);
    return n;
}

TEST(advanced_st_writer_streams_blocks_in_any_order) {
    const char *path = tjoin(th_tmpdir(), "m.safetensors");
    float a[35];
    int64_t b[3] = {-1, 2, 1LL << 40};
    double c = 2.5;
    th_fill(a, sizeof a, 7);
    sck_st_tensor t[3] = {{"a", SCK_F32, 2, {5, 7}}, {"b", SCK_I64, 1, {3}}, {"c", SCK_F64, 0, {0}}};
    sck_value *vals = sck_value_dict();
    REQUIRE(vals);
    CHECK_OK(sck_value_dict_set(vals, "step", sck_value_int(3)));
    CHECK_OK(sck_value_dict_set(vals, "note", sck_value_string("hi")));
    sck_st_writer *w = NULL;
    REQUIRE_OK(sck_st_writer_open(path, t, 3, vals, NULL, &w));
    sck_value_free(vals);
    /* a's second block first, then its first; nothing is at the final name before the commit */
    CHECK_OK(sck_st_writer_write(w, 0, 80, (const uint8_t *)a + 80, sizeof a - 80));
    CHECK_OK(sck_st_writer_write(w, 0, 0, a, 80));
    CHECK_OK(sck_st_writer_write(w, 1, 0, b, sizeof b));
    CHECK_OK(sck_st_writer_write(w, 2, 0, &c, sizeof c));
    CHECK_ERR(sck_st_writer_write(w, 1, 8, b, sizeof b), SCK_ERR_INVALID_ARG, "are past its 24 bytes");
    CHECK_ERR(sck_st_writer_write(w, 3, 0, b, 1), SCK_ERR_INVALID_ARG, "out of range");
    CHECK(!exists(path) && exists(tjoin(th_tmpdir(), "m.safetensors.tmp")));
    REQUIRE_OK(sck_st_writer_commit(w));
    CHECK_ERR(sck_st_writer_write(w, 1, 0, b, 8), SCK_ERR_INVALID_ARG, "committed");
    CHECK_ERR(sck_st_writer_commit(w), SCK_ERR_INVALID_ARG, "committed");
    sck_st_writer_free(w);
    CHECK(exists(path) && !exists(tjoin(th_tmpdir(), "m.safetensors.tmp")));

    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(path, &ck));
    REQUIRE(sck_ckpt_count(ck) == 3);
    float got[35];
    long ia = sck_ckpt_find(ck, "a");
    REQUIRE(ia >= 0);
    memset(got, 0, sizeof got);
    CHECK_OK(sck_ckpt_read_flat(ck, (size_t)ia, 3, 20, got)); /* three boxes: a row's tail, rows, a head */
    CHECK(!memcmp(got, a + 3, 20 * sizeof *a));
    CHECK_OK(sck_ckpt_read_flat(ck, (size_t)ia, 0, 0, NULL));
    CHECK_ERR(sck_ckpt_read_flat(ck, (size_t)ia, 30, 6, got), SCK_ERR_INVALID_ARG, "'a': elements [30, +6) are outside the tensor");
    CHECK_ERR(sck_ckpt_read_flat(ck, 9, 0, 1, got), SCK_ERR_INVALID_ARG, "out of range");
    int64_t gb[3];
    CHECK_OK(sck_ckpt_read_flat(ck, (size_t)sck_ckpt_find(ck, "b"), 0, 3, gb));
    CHECK(!memcmp(gb, b, sizeof b));
    sck_ckpt_close(ck);

    sck_value *v = NULL;
    REQUIRE_OK(sck_safetensors_values(path, &v));
    CHECK(sck_value_len(v) == 2 && sck_value_get_int(sck_value_dict_get(v, "step")) == 3);
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(v, "note"), NULL), "hi"));
    sck_value_free(v);
    CHECK_ERR(sck_safetensors_values(tjoin(th_tmpdir(), "none.safetensors"), &v), SCK_ERR_IO, "none.safetensors");
    CHECK(v == NULL);
}

TEST(advanced_st_writer_hf_shards_and_abandon) {
    const char *dir = tjoin(th_tmpdir(), "hf");
    uint8_t d[3][64];
    th_fill(d, sizeof d, 3);
    sck_st_tensor t[3] = {{"x.0", SCK_U8, 1, {64}}, {"x.1", SCK_U8, 2, {8, 8}}, {"x.2", SCK_I16, 1, {32}}};
    sck_full_opts o = {SCK_FULL_HF_SHARDED, SCK_SAVE_NO_FSYNC, 100, {0}};
    sck_st_writer *w = NULL;
    /* abandoned: the temporary shards go, and no index ever appears */
    REQUIRE_OK(sck_st_writer_open(dir, t, 3, NULL, &o, &w));
    CHECK(count_suffix(dir, ".tmp") == 3);
    CHECK_OK(sck_st_writer_write(w, 0, 0, d[0], 64));
    sck_st_writer_free(w);
    CHECK(count_suffix(dir, ".tmp") == 0 && !exists(tjoin(dir, SCK_HF_INDEX_NAME)));
    /* committed: one shard per tensor (100-byte shards), the index last */
    REQUIRE_OK(sck_st_writer_open(dir, t, 3, NULL, &o, &w));
    for (size_t i = 0; i < 3; i++) CHECK_OK(sck_st_writer_write(w, i, 0, d[i], 64));
    REQUIRE_OK(sck_st_writer_commit(w));
    sck_st_writer_free(w);
    CHECK(exists(tjoin(dir, SCK_HF_INDEX_NAME)) && exists(tjoin(dir, "model-00003-of-00003.safetensors")));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    uint8_t got[64];
    for (size_t i = 0; i < 3; i++) {
        sck_entry_info e;
        CHECK_OK(sck_ckpt_entry(ck, i, &e));
        CHECK_OK(sck_ckpt_read_flat(ck, i, 0, 64 / sck_dtype_size(e.dtype), got));
        CHECK(!memcmp(got, d[i], 64));
    }
    sck_ckpt_close(ck);
    /* bad arguments and options are refused before anything is created */
    const char *other = tjoin(th_tmpdir(), "other");
    sck_full_opts bad = o;
    bad.reserved[2] = 1;
    CHECK_ERR(sck_st_writer_open(other, t, 3, NULL, &bad, &w), SCK_ERR_INVALID_ARG, "reserved");
    CHECK(w == NULL && !exists(other));
    sck_st_tensor dup[2] = {{"k", SCK_U8, 1, {4}}, {"k", SCK_U8, 1, {4}}};
    CHECK_ERR(sck_st_writer_open(tjoin(th_tmpdir(), "dup.safetensors"), dup, 2, NULL, NULL, &w), SCK_ERR_INVALID_ARG, "k");
    CHECK(w == NULL && !exists(tjoin(th_tmpdir(), "dup.safetensors.tmp")));
}

TEST(advanced_key_select_size_and_pickle_description) {
    const char *keys[4] = {"model.a", "model.b", "a", "opt.x"};
    const char *out[4];
    const char *inc[1] = {"model.*"}, *exc[1] = {"*.b"};
    sck_key_select s = {inc, 1, exc, 1, "model."};
    CHECK_OK(sck_key_select_apply(&s, "src", keys, 4, out));
    CHECK(out[0] && !strcmp(out[0], "a") && !out[1] && !out[2] && !out[3]);
    sck_key_select strip = {NULL, 0, NULL, 0, "model."};
    CHECK_ERR(sck_key_select_apply(&strip, "src", keys, 4, out), SCK_ERR_INVALID_ARG,
              "src: keys 'a' and 'model.a' would both be named 'a'");
    CHECK(!strcmp(sck_key_select_name(NULL, "k"), "k"));

    uint64_t v = 0;
    CHECK_OK(sck_parse_size("2GiB", &v));
    CHECK(v == 2147483648ull);
    CHECK_ERR(sck_parse_size("5XB", &v), SCK_ERR_INVALID_ARG, "'5XB' is not a size");
    CHECK_ERR(sck_parse_size("", &v), SCK_ERR_INVALID_ARG, "is not a size");

    char buf[64] = "junk";
    sck_value *i = sck_value_int(1);
    CHECK_ERR(sck_value_describe_pickle(i, buf, sizeof buf), SCK_ERR_INVALID_ARG, "not a pickle");
    CHECK(buf[0] == 0);
    sck_value_free(i);
    /* protocol 2: an empty set, built by calling builtins.set on an empty list */
    static const char set_pkl[] = "\x80\x02" "c__builtin__\nset\n" "]\x85R.";
    sck_value *p = sck_value_pickle(set_pkl, sizeof set_pkl - 1);
    REQUIRE(p);
    CHECK_OK(sck_value_describe_pickle(p, buf, sizeof buf));
    CHECK(!strcmp(buf, "set"));
    sck_value_free(p);
}

TEST(advanced_torch_save_file_read_without_running_it) {
    /* a Fabric save writes meta.pt, a torch.save archive of the top-level values */
    const char *dir = tjoin(th_tmpdir(), "ck");
    sck_state *st = sck_state_new();
    REQUIRE(st);
    float w[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    CHECK_OK(sck_state_add_replicated(st, "model.w", SCK_F32, 1, shape, w));
    CHECK_OK(sck_state_add_value(st, "step", sck_value_int(12)));
    sck_save_opts so = {SCK_SAVE_FABRIC | SCK_SAVE_NO_FSYNC, 0, {0}};
    REQUIRE_OK(sck_save(NULL, dir, st, &so));
    sck_state_free(st);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long is = sck_ckpt_find(ck, "step");
    float one;
    CHECK(is >= 0);
    CHECK_ERR(sck_ckpt_read_flat(ck, (size_t)is, 0, 1, &one), SCK_ERR_MISMATCH, "'step': is a value in meta.pt");
    sck_ckpt_close(ck);
    const char *meta = tjoin(dir, "meta.pt");
    CHECK(sck_pt_probe(meta) == 1 && sck_pt_probe(tjoin(dir, ".metadata")) == 0 && sck_pt_probe(tjoin(dir, "nope")) == 0);
    sck_pt *pt = NULL;
    REQUIRE_OK(sck_pt_open(meta, &pt));
    CHECK(sck_pt_prefix(pt) && sck_pt_prefix(pt)[0]);
    int found = 0;
    for (size_t k = 0; k < sck_pt_count(pt); k++) {
        sck_pt_info e;
        CHECK_OK(sck_pt_entry(pt, k, &e));
        if (!strcmp(e.key, "step")) found = !e.is_tensor && !strcmp(e.type, "int") && !strcmp(e.text, "12");
    }
    CHECK(found);
    sck_pt_info e;
    CHECK_ERR(sck_pt_entry(pt, sck_pt_count(pt), &e), SCK_ERR_INVALID_ARG, "out of range");
    sck_pt_close(pt);
    pt = (sck_pt *)1;
    CHECK(sck_pt_open(tjoin(dir, ".metadata"), &pt) != SCK_OK && pt == NULL);
}

/* 1 if the HF directory opens and its three 64-byte tensors hold d. */
static int hf_holds(const char *dir, uint8_t d[3][64]) {
    sck_ckpt *ck;
    if (sck_ckpt_open(dir, &ck)) return 0;
    int ok = sck_ckpt_count(ck) == 3;
    uint8_t got[64];
    for (size_t i = 0; i < 3 && ok; i++) {
        sck_entry_info e;
        ok = !sck_ckpt_entry(ck, i, &e) && !sck_ckpt_read_flat(ck, i, 0, 64 / sck_dtype_size(e.dtype), got) &&
             !memcmp(got, d[i], 64);
    }
    sck_ckpt_close(ck);
    return ok;
}

static int hf_export(const char *dir, uint8_t d[3][64], uint64_t max_shard, int commit) {
    sck_st_tensor t[3] = {{"x.0", SCK_U8, 1, {64}}, {"x.1", SCK_U8, 2, {8, 8}}, {"x.2", SCK_I16, 1, {32}}};
    sck_full_opts o = {SCK_FULL_HF_SHARDED, SCK_SAVE_NO_FSYNC, max_shard, {0}};
    sck_st_writer *w = NULL;
    int rc = sck_st_writer_open(dir, t, 3, NULL, &o, &w);
    for (size_t i = 0; i < 3 && !rc; i++) rc = sck_st_writer_write(w, i, 0, d[i], 64);
    if (!rc && commit) rc = sck_st_writer_commit(w);
    sck_st_writer_free(w);
    return rc;
}

TEST(advanced_st_writer_replacing_an_hf_export_keeps_the_old_one_until_the_commit) {
    const char *dir = tjoin(th_tmpdir(), "hf");
    uint8_t d1[3][64], d2[3][64], d3[3][64];
    th_fill(d1, sizeof d1, 1);
    th_fill(d2, sizeof d2, 2);
    th_fill(d3, sizeof d3, 3);
    REQUIRE_OK(hf_export(dir, d1, 100, 1)); /* three shards */
    REQUIRE(hf_holds(dir, d1));
    /* written but abandoned (a failed convert --force): the old export is untouched */
    REQUIRE_OK(hf_export(dir, d2, 0, 0));
    CHECK(hf_holds(dir, d1) && count_suffix(dir, ".tmp") == 0);
    /* while the new files are written, the old index and shards stay whole */
    sck_st_tensor t[3] = {{"x.0", SCK_U8, 1, {64}}, {"x.1", SCK_U8, 2, {8, 8}}, {"x.2", SCK_I16, 1, {32}}};
    sck_full_opts o = {SCK_FULL_HF_SHARDED, SCK_SAVE_NO_FSYNC, 0, {0}};
    sck_st_writer *w = NULL;
    REQUIRE_OK(sck_st_writer_open(dir, t, 3, NULL, &o, &w));
    for (size_t i = 0; i < 3; i++) CHECK_OK(sck_st_writer_write(w, i, 0, d2[i], 64));
    CHECK(hf_holds(dir, d1));
    CHECK_OK(sck_st_writer_commit(w));
    sck_st_writer_free(w);
    /* one shard now; the three of the old export are gone */
    CHECK(hf_holds(dir, d2) && !exists(tjoin(dir, "model-00001-of-00003.safetensors")) &&
          exists(tjoin(dir, "model-00001-of-00001.safetensors")));
    /* the same shard count: the old export is whole until the commit too */
    REQUIRE_OK(sck_st_writer_open(dir, t, 3, NULL, &o, &w));
    for (size_t i = 0; i < 3; i++) CHECK_OK(sck_st_writer_write(w, i, 0, d3[i], 64));
    CHECK(hf_holds(dir, d2));
    CHECK_OK(sck_st_writer_commit(w));
    sck_st_writer_free(w);
    CHECK(hf_holds(dir, d3) && count_suffix(dir, ".tmp") == 0);
}
