/* test_cli.c - the shardckpt command line, run as a program (the binary next to this runner:
 * BUILD/bin/shardckpt): inspect (tree, --flat, --json), diff, convert between every format, help,
 * usage errors and the progress bar's quiet mode. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "base/util.h"
#include "format/torch_item.h"
#include "format/safetensors.h"
#include "io/storage.h"

static const char *cli_bin(void) {
    static char bin[PATH_MAX + 32];
    if (bin[0]) return bin;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = 0;
    char *slash = strrchr(self, '/');   /* BUILD/tests/run_tests -> BUILD/bin/shardckpt */
    if (!slash) return NULL;
    *slash = 0;
    slash = strrchr(self, '/');
    if (!slash) return NULL;
    *slash = 0;
    snprintf(bin, sizeof bin, "%s/bin/shardckpt", self);
    return bin;
}

/* Runs `shardckpt ARGS` with the given environment prefix; stdout into out (cap bytes, NUL-ended),
 * stderr into err.  Returns the exit status, or -1 if it did not exit normally. */
static int run_cli(const char *env, const char *args, char *out, size_t cap, char *err, size_t ecap) {
    char errfile[PATH_MAX], cmd[8192];
    snprintf(errfile, sizeof errfile, "%s/stderr.txt", th_tmpdir());
    snprintf(cmd, sizeof cmd, "%s '%s' %s 2>'%s'", env ? env : "", cli_bin(), args, errfile);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF) {}
    int st = pclose(p);
    FILE *f = fopen(errfile, "r");
    size_t en = f ? fread(err, 1, ecap - 1, f) : 0;
    err[en] = 0;
    if (f) fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char g_out[1 << 16], g_err[1 << 14];

#define RUN(args) run_cli(NULL, args, g_out, sizeof g_out, g_err, sizeof g_err)

static const char *tpath(const char *name) {
    static char p[8][PATH_MAX];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", th_tmpdir(), name);
    return p[k];
}

static char *args_of(const char *fmt, const char *a, const char *b) {
    static char buf[4][4096];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], fmt, a, b);
    return buf[k];
}

/* ---- a small checkpoint: 2 ranks, dim-0 split, four dtypes, a value and a blob ---- */

typedef struct fixture {
    const char *dir;
    float w[4][6];
    uint16_t h[5];       /* float16 */
    uint16_t bf[3];      /* bfloat16 */
    int64_t ids[4];
    uint8_t mask[3];
    int64_t step;
} fixture;

static void fixture_init(fixture *f, const char *dir) {
    memset(f, 0, sizeof *f);
    f->dir = dir;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) f->w[i][j] = (float)(i * 6 + j) * 0.25f;
    const uint16_t h[5] = {0x3C00, 0x4000, 0xC200, 0x0001, 0x7BFF};   /* 1, 2, -3, 2^-24, 65504 */
    memcpy(f->h, h, sizeof h);
    const uint16_t bf[3] = {0x3F80, 0x4000, 0xC040};                  /* 1, 2, -3 */
    memcpy(f->bf, bf, sizeof bf);
    const int64_t ids[4] = {-5, 0, 7, (int64_t)1 << 62};
    memcpy(f->ids, ids, sizeof ids);
    f->mask[0] = 1;
    f->mask[2] = 1;
    f->step = 100;
}

static int fixture_save(sck_comm *comm, void *arg) {
    fixture *f = arg;
    int r = sck_comm_rank(comm);
    int64_t wshape[2] = {4, 6}, woff[2] = {2 * r, 0}, wsz[2] = {2, 6};
    int64_t hshape[1] = {5}, bshape[1] = {3}, ishape[1] = {4}, mshape[1] = {3};
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "model.layers.0.weight", SCK_F32, 2, wshape, woff, wsz, &f->w[2 * r][0]);
    if (!rc) rc = sck_state_add_flat(st, "model.layers.0.half", SCK_F16, 1, hshape, r ? 3 : 0, r ? 2 : 3, &f->h[r ? 3 : 0]);
    if (!rc) rc = sck_state_add_replicated(st, "model.norm.bf16", SCK_BF16, 1, bshape, f->bf);
    if (!rc) rc = sck_state_add_replicated(st, "model.ids", SCK_I64, 1, ishape, f->ids);
    if (!rc) rc = sck_state_add_replicated(st, "model.mask", SCK_BOOL, 1, mshape, f->mask);
    if (!rc) rc = sck_state_add_value(st, "other.step", sck_value_int(f->step));
    if (!rc) rc = sck_state_add_blob(st, "other.rng", "\x01\x02\xff", 3);
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_save(comm, f->dir, st, NULL);
    sck_state_free(st);
    return rc;
}

static void make_fixture(fixture *f, const char *dir) {
    fixture_init(f, dir);
    int rc = sck_threads_run(2, fixture_save, f);
    if (rc) th_fail_status(__FILE__, __LINE__, "fixture save", rc);
}

/* ---- help and usage ---- */

TEST(cli_help_for_every_command) {
    REQUIRE(cli_bin() && access(cli_bin(), X_OK) == 0);
    CHECK(RUN("--help") == 0);
    CHECK(strstr(g_out, "inspect PATH") && strstr(g_out, "diff A B") && strstr(g_out, "convert SRC DST"));
    const char *cmds[] = {"inspect", "diff", "convert"};
    for (int i = 0; i < 3; i++) {
        char a[64], want[64];
        snprintf(a, sizeof a, "%s --help", cmds[i]);
        snprintf(want, sizeof want, "usage: shardckpt %s", cmds[i]);
        CHECK(RUN(a) == 0);
        CHECK(strstr(g_out, want) != NULL);
        CHECK(strstr(g_out, "Exit status") != NULL);
    }
    CHECK(RUN("") == 2);
    CHECK(strstr(g_err, "usage: shardckpt") != NULL);
    CHECK(RUN("frobnicate") == 2);
    CHECK(strstr(g_err, "unknown command 'frobnicate'") != NULL);
    CHECK(RUN("inspect --bogus x") == 2);
    CHECK(strstr(g_err, "shardckpt: inspect: unknown option '--bogus'") && strstr(g_err, "Try 'shardckpt inspect --help'"));
    CHECK(RUN("inspect") == 2);
    CHECK(RUN("convert a b --to zip") == 2);
    CHECK(strstr(g_err, "--to must be dcp, fabric, safetensors or hf, not 'zip'") != NULL);
    CHECK(RUN("convert a b") == 2);
    CHECK(strstr(g_err, "say --to dcp") != NULL);
    CHECK(RUN("convert a b --to hf --max-shard-size 5XB") == 2);
    CHECK(strstr(g_err, "--max-shard-size wants a size") != NULL);
    CHECK(RUN("convert a b --to dcp --max-shard-size 5GB") == 2);
    CHECK(RUN("diff onlyone") == 2);
    CHECK(RUN("diff a b --atol -1") == 2);
}

TEST(cli_errors_name_the_path) {
    CHECK(RUN(args_of("inspect %s%s", tpath("missing"), "")) == 1);
    CHECK(strstr(g_err, "shardckpt: error: ") && strstr(g_err, "missing: cannot open checkpoint"));
    CHECK(RUN(args_of("diff %s %s", tpath("missing"), tpath("missing2"))) == 2);
    CHECK(strstr(g_err, "shardckpt: error: ") != NULL);
    fixture f;
    make_fixture(&f, tpath("ck"));
    CHECK(RUN(args_of("convert %s %s --to dcp", f.dir, f.dir)) == 2);
    CHECK(strstr(g_err, "SRC and DST are the same") != NULL);
}

/* ---- inspect ---- */

TEST(cli_inspect_json_schema) {
    fixture f;
    make_fixture(&f, tpath("ck"));
    REQUIRE(RUN(args_of("inspect --json %s%s", f.dir, "")) == 0);
    sck_value *j = NULL;
    REQUIRE_OK(sck_value_from_json(g_out, strlen(g_out), &j));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(j, "schema"), NULL), "shardckpt.inspect/1"));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(j, "format"), NULL), "dcp"));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(j, "path"), NULL), f.dir));
    CHECK(sck_value_get_int(sck_value_dict_get(j, "files")) == 2);
    const sck_value *es = sck_value_dict_get(j, "entries");
    REQUIRE(sck_value_len(es) == 7);
    const char *keys[7] = {"model.ids", "model.layers.0.half", "model.layers.0.weight", "model.mask", "model.norm.bf16",
                           "other.rng", "other.step"};
    for (int i = 0; i < 7; i++) CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(sck_value_at(es, (size_t)i), "key"), NULL), keys[i]));
    const sck_value *w = sck_value_at(es, 2);
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(w, "kind"), NULL), "tensor"));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(w, "dtype"), NULL), "float32"));
    CHECK(sck_value_get_int(sck_value_dict_get(w, "nbytes")) == 96);
    const sck_value *shape = sck_value_dict_get(w, "shape");
    CHECK(sck_value_len(shape) == 2 && sck_value_get_int(sck_value_at(shape, 0)) == 4 && sck_value_get_int(sck_value_at(shape, 1)) == 6);
    const sck_value *chunks = sck_value_dict_get(w, "chunks");
    REQUIRE(sck_value_len(chunks) == 2);
    const sck_value *c1 = sck_value_at(chunks, 1);
    CHECK(sck_value_get_int(sck_value_at(sck_value_dict_get(c1, "offsets"), 0)) == 2);
    CHECK(sck_value_get_int(sck_value_at(sck_value_dict_get(c1, "sizes"), 0)) == 2);
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(c1, "file"), NULL), "__1_0.distcp"));
    CHECK(sck_value_get_int(sck_value_dict_get(c1, "length")) > 48);
    const sck_value *half = sck_value_at(es, 1);
    CHECK(sck_value_len(sck_value_dict_get(half, "chunks")) == 2);     /* flat ranges [0,3) and [3,5) */
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(sck_value_at(es, 6), "kind"), NULL), "bytes"));
    int64_t total = 0;
    for (int i = 0; i < 7; i++) total += sck_value_get_int(sck_value_dict_get(sck_value_at(es, (size_t)i), "nbytes"));
    CHECK(sck_value_get_int(sck_value_dict_get(j, "total_bytes")) == total);
    sck_value_free(j);

    /* a safetensors file: values from __metadata__ are "value" entries holding the value itself */
    REQUIRE(RUN(args_of("convert %s %s", f.dir, tpath("f.safetensors"))) == 0);
    REQUIRE(RUN(args_of("inspect --json %s%s", tpath("f.safetensors"), "")) == 0);
    REQUIRE_OK(sck_value_from_json(g_out, strlen(g_out), &j));
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(j, "format"), NULL), "safetensors"));
    es = sck_value_dict_get(j, "entries");
    REQUIRE(sck_value_len(es) == 7);
    const sck_value *step = sck_value_at(es, 6);
    CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(step, "kind"), NULL), "value"));
    CHECK(sck_value_get_int(sck_value_dict_get(step, "value")) == 100);
    CHECK(sck_value_len(sck_value_dict_get(sck_value_at(es, 2), "chunks")) == 1);
    sck_value_free(j);
}

TEST(cli_inspect_tree_and_flat) {
    fixture f;
    make_fixture(&f, tpath("ck"));
    REQUIRE(RUN(args_of("inspect %s%s", f.dir, "")) == 0);
    CHECK(strstr(g_out, ": DCP checkpoint, 7 entries (5 tensors, 2 other)") != NULL);
    CHECK(strstr(g_out, "\nmodel/ ") != NULL);
    CHECK(strstr(g_out, "\n  layers.0/ ") != NULL);      /* single-child chain folded */
    CHECK(strstr(g_out, "\n    weight ") != NULL);
    CHECK(strstr(g_out, "\n  norm.bf16 ") != NULL);      /* a lone entry keeps the rest of its key */
    const char *w = strstr(g_out, "\n    weight ");
    CHECK(w && strstr(w, "float32") && strstr(w, "[4, 6]") && strstr(w, "96 B") && strstr(w, "2 chunks"));
    CHECK(strstr(g_out, "\nother/ ") != NULL);
    REQUIRE(RUN(args_of("inspect --depth 1 %s%s", f.dir, "")) == 0);
    CHECK(strstr(g_out, "\nmodel/ ") && strstr(g_out, "5 tensors"));
    CHECK(strstr(g_out, "layers.0") == NULL);
    REQUIRE(RUN(args_of("inspect --flat %s%s", f.dir, "")) == 0);
    CHECK(strstr(g_out, "KEY") && strstr(g_out, "CHUNKS"));
    CHECK(strstr(g_out, "\nmodel.layers.0.weight ") != NULL);
    CHECK(strstr(g_out, "7 entries") != NULL);
}

/* ---- convert ---- */

typedef struct lj {
    const char *path;
    fixture want;
    int values;   /* also load other.step / other.rng (DCP sources: sck_load does not read __metadata__) */
    int bad;
} lj;

/* Loads the fixture back with 3 ranks splitting the weight by columns and checks every value. */
static int load_check(sck_comm *comm, void *arg) {
    lj *j = arg;
    int r = sck_comm_rank(comm);
    float w[4][2];
    uint16_t h[5], bf[3];
    int64_t ids[4];
    uint8_t mask[3];
    int64_t wshape[2] = {4, 6}, woff[2] = {0, 2 * r}, wsz[2] = {4, 2}, s5[1] = {5}, s3[1] = {3}, s4[1] = {4};
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "model.layers.0.weight", SCK_F32, 2, wshape, woff, wsz, w);
    if (!rc) rc = sck_state_add_replicated(st, "model.layers.0.half", SCK_F16, 1, s5, h);
    if (!rc) rc = sck_state_add_replicated(st, "model.norm.bf16", SCK_BF16, 1, s3, bf);
    if (!rc) rc = sck_state_add_replicated(st, "model.ids", SCK_I64, 1, s4, ids);
    if (!rc) rc = sck_state_add_replicated(st, "model.mask", SCK_BOOL, 1, s3, mask);
    if (!rc && j->values) rc = sck_state_add_value(st, "other.step", NULL);
    if (!rc && j->values) rc = sck_state_add_blob(st, "other.rng", NULL, 0);
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_load(comm, j->path, st, NULL);
    if (!rc) {
        int bad = 0;
        for (int i = 0; i < 4; i++)
            for (int c = 0; c < 2; c++) bad |= w[i][c] != j->want.w[i][2 * r + c];
        bad |= memcmp(h, j->want.h, sizeof h) || memcmp(bf, j->want.bf, sizeof bf) || memcmp(ids, j->want.ids, sizeof ids) ||
               memcmp(mask, j->want.mask, sizeof mask);
        const void *b;
        size_t bn;
        if (j->values) {
            bad |= sck_value_get_int(sck_state_value(st, "other.step")) != 100;
            bad |= sck_state_blob(st, "other.rng", &b, &bn) != 0 || bn != 3 || memcmp(b, "\x01\x02\xff", 3);
        }
        if (bad) __atomic_add_fetch(&j->bad, 1, __ATOMIC_SEQ_CST);
    }
    sck_state_free(st);
    return rc;
}

static int file_equal(const char *a, const char *b) {
    uint8_t *da, *db;
    size_t na, nb;
    if (sck_read_file(a, &da, &na)) return 0;
    if (sck_read_file(b, &db, &nb)) {
        free(da);
        return 0;
    }
    int eq = na == nb && !memcmp(da, db, na);
    free(da);
    free(db);
    return eq;
}

TEST(cli_convert_between_every_format) {
    fixture f;
    make_fixture(&f, tpath("ck"));
    const char *st1 = tpath("a.safetensors"), *st2 = tpath("b.safetensors"), *hf = tpath("hf"), *back = tpath("back");
    /* DCP -> safetensors, streamed and by 3 ranks with sck_save_full: the same bytes */
    REQUIRE(RUN(args_of("convert %s %s --to safetensors", f.dir, st1)) == 0);
    CHECK(g_out[0] == 0 && g_err[0] == 0);   /* quiet when piped */
    REQUIRE(RUN(args_of("convert %s %s --to safetensors --ranks 3", f.dir, st2)) == 0);
    CHECK(file_equal(st1, st2));
    /* safetensors -> HF with a 40-byte cap: ids 32 | half 10 | weight 96 | mask 3 + bf16 6 */
    REQUIRE(RUN(args_of("convert %s %s --to hf --max-shard-size 40B", st1, hf)) == 0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/model-00004-of-00004.safetensors", hf);
    CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", hf);
    CHECK(access(p, F_OK) == 0);
    /* HF -> DCP on 4 ranks, then every value back */
    REQUIRE(RUN(args_of("convert %s %s --to dcp --ranks 4", hf, back)) == 0);
    snprintf(p, sizeof p, "%s/__3_0.distcp", back);
    CHECK(access(p, F_OK) == 0);
    const char *all[5] = {f.dir, st1, hf, back, NULL};
    for (int i = 0; all[i]; i++) {
        /* values of safetensors sources are checked by diff (sck_load reads tensors only from them) */
        lj j = {all[i], f, i == 0 || i == 3, 0};
        CHECK_OK(sck_threads_run(3, load_check, &j));
        CHECK(j.bad == 0);
        /* diff sees no difference between any of them */
        CHECK(RUN(args_of("diff %s %s", f.dir, all[i])) == 0);
        CHECK(strstr(g_out, "identical: 0 changed, 0 added, 0 removed, 7 identical") != NULL);
    }
    /* HF -> HF by 2 ranks in parallel equals the streamed one */
    REQUIRE(RUN(args_of("convert %s %s --to hf --max-shard-size 40B --ranks 2", back, tpath("hf2"))) == 0);
    for (int k = 1; k <= 4; k++) {
        char a[PATH_MAX], b[PATH_MAX];
        snprintf(a, sizeof a, "%s/model-%05d-of-00004.safetensors", hf, k);
        snprintf(b, sizeof b, "%s/model-%05d-of-00004.safetensors", tpath("hf2"), k);
        CHECK(file_equal(a, b));
    }
}

TEST(cli_progress_bar_only_when_asked_or_on_a_tty) {
    fixture f;
    make_fixture(&f, tpath("ck"));
    char a[PATH_MAX * 2];
    snprintf(a, sizeof a, "convert %s %s --force", f.dir, tpath("p.safetensors"));
    CHECK(run_cli(NULL, a, g_out, sizeof g_out, g_err, sizeof g_err) == 0);
    CHECK(g_err[0] == 0);
    CHECK(run_cli("SHARDCKPT_PROGRESS=always", a, g_out, sizeof g_out, g_err, sizeof g_err) == 0);
    CHECK(strstr(g_err, "converting [") && strstr(g_err, "100%") && strstr(g_err, "147 B / 147 B"));
    snprintf(a, sizeof a, "convert %s %s --to dcp --ranks 2 --force", f.dir, tpath("p2"));
    CHECK(run_cli("SHARDCKPT_PROGRESS=always", a, g_out, sizeof g_out, g_err, sizeof g_err) == 0);
    CHECK(strstr(g_err, "writing [") && strstr(g_err, "294 B / 294 B"));
    CHECK(run_cli("SHARDCKPT_PROGRESS=never", a, g_out, sizeof g_out, g_err, sizeof g_err) == 0);
    CHECK(g_err[0] == 0);
}

/* ---- diff ---- */

static void make_variant(fixture *f, const char *dir) {
    fixture_init(f, dir);
    f->w[3][5] += 0.25f;     /* float32: 0.25 */
    f->w[0][0] = -0.0f;      /* -0.0 == 0.0: not a difference */
    f->h[1] = 0x4100;        /* float16 2.0 -> 2.5 */
    f->bf[2] = 0xC050;       /* bfloat16 -3.0 -> -3.25 */
    f->ids[3] -= 3;          /* int64 2^62 -> 2^62 - 3: exactly 3 */
    f->mask[1] = 1;          /* bool 0 -> 1 */
    f->step = 101;
    if (sck_threads_run(2, fixture_save, f)) th_fail(__FILE__, __LINE__, "variant save");
}

TEST(cli_diff_reports_every_kind_of_change) {
    fixture f, g;
    make_fixture(&f, tpath("a"));
    make_variant(&g, tpath("b"));
    REQUIRE(RUN(args_of("diff %s %s", f.dir, g.dir)) == 1);
    CHECK(strstr(g_out, "~ model.layers.0.weight") && strstr(g_out, "max abs diff 0.25, 1 of 24 elements differ"));
    CHECK(strstr(g_out, "~ model.layers.0.half") && strstr(g_out, "max abs diff 0.5, 1 of 5 elements differ"));
    CHECK(strstr(g_out, "~ model.norm.bf16") && strstr(g_out, "max abs diff 0.25, 1 of 3"));
    CHECK(strstr(g_out, "~ model.ids") && strstr(g_out, "max abs diff 3, 1 of 4"));
    CHECK(strstr(g_out, "~ model.mask") && strstr(g_out, "max abs diff 1, 1 of 3"));
    CHECK(strstr(g_out, "~ other.step") && strstr(g_out, "100 -> 101"));
    CHECK(strstr(g_out, "different: 6 changed, 0 added, 0 removed, 1 identical") != NULL);
    /* tolerance */
    REQUIRE(RUN(args_of("diff --atol 0.3 %s %s", f.dir, g.dir)) == 1);
    CHECK(strstr(g_out, "model.layers.0.weight") == NULL && strstr(g_out, "model.norm.bf16") == NULL);
    CHECK(strstr(g_out, "model.layers.0.half") != NULL);
    /* quiet */
    CHECK(RUN(args_of("diff -q %s %s", f.dir, g.dir)) == 1);
    CHECK(g_out[0] == 0);
    /* across formats and shardings: the variant as HF shards vs the original as a safetensors file */
    REQUIRE(RUN(args_of("convert %s %s --to hf --max-shard-size 30B", g.dir, tpath("bhf"))) == 0);
    REQUIRE(RUN(args_of("convert %s %s", f.dir, tpath("a.safetensors"))) == 0);
    CHECK(RUN(args_of("diff %s %s", tpath("a.safetensors"), tpath("bhf"))) == 1);
    CHECK(strstr(g_out, "different: 6 changed, 0 added, 0 removed, 1 identical") != NULL);
    /* added, removed, dtype/shape and kind changes */
    const char *c = tpath("c.safetensors");
    FILE *fp = fopen(c, "wb");
    REQUIRE(fp != NULL);
    /* one F64 [4,6] weight and one new tensor, nothing else */
    const char *hdr = "{\"model.layers.0.weight\":{\"dtype\":\"F64\",\"shape\":[4,6],\"data_offsets\":[0,192]},"
                      "\"zz.new\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[192,194]}}";
    uint64_t hl = strlen(hdr);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    fwrite(le, 1, 8, fp);
    fwrite(hdr, 1, hl, fp);
    static uint8_t zeros[194];
    fwrite(zeros, 1, sizeof zeros, fp);
    fclose(fp);
    REQUIRE(RUN(args_of("diff %s %s -v", f.dir, c)) == 1);
    CHECK(strstr(g_out, "~ model.layers.0.weight") && strstr(g_out, "float32 [4, 6] -> float64 [4, 6]"));
    CHECK(strstr(g_out, "- model.ids") && strstr(g_out, "- other.step") && strstr(g_out, "+ zz.new"));
    CHECK(strstr(g_out, "different: 1 changed, 1 added, 6 removed, 0 identical") != NULL);
    /* identical, with -v listing every entry */
    REQUIRE(RUN(args_of("diff -v %s %s", f.dir, tpath("a.safetensors"))) == 0);
    CHECK(strstr(g_out, "= model.mask") && strstr(g_out, "= other.rng"));
}

/* A safetensors file of the tensors in `hdr` (JSON) with `n` data bytes. */
static void write_st(const char *path, const char *hdr, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        th_fail(__FILE__, __LINE__, "fopen");
        return;
    }
    uint64_t hl = strlen(hdr);
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(hl >> (8 * i));
    if (fwrite(le, 1, 8, fp) != 8 || fwrite(hdr, 1, hl, fp) != hl || fwrite(data, 1, n, fp) != n) th_fail(__FILE__, __LINE__, "fwrite");
    fclose(fp);
}

/* float8, complex and uint64 elements compare as numbers: e4m3fn 1.0 -> 1.25 is 0.25 (its NaN equals
 * itself), complex64 (1, 2) -> (1, 2.5) is 0.5, uint64 2^63+5 -> 2^63+2 is exactly 3. */
TEST(cli_diff_and_inspect_of_float8_complex_and_uint64) {
    const char *hdr = "{\"c\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                      "\"u\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[8,16]},"
                      "\"f8a\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[16,19]},"
                      "\"f8b\":{\"dtype\":\"F8_E5M2\",\"shape\":[2],\"data_offsets\":[19,21]},"
                      "\"e\":{\"dtype\":\"F8_E8M0\",\"shape\":[1],\"data_offsets\":[21,22]}}";
    uint8_t a[22], b[22];
    float c[2] = {1.0f, 2.0f};
    uint64_t u = (1ull << 63) + 5;
    memcpy(a, c, 8);
    memcpy(a + 8, &u, 8);
    const uint8_t rest_a[6] = {0x38, 0x40, 0x7F, 0x3C, 0x7C, 127}; /* 1, 2, NaN | 1, inf | 1 */
    memcpy(a + 16, rest_a, 6);
    memcpy(b, a, sizeof b);
    c[1] = 2.5f;
    u -= 3;
    memcpy(b, c, 8);
    memcpy(b + 8, &u, 8);
    b[16] = 0x3A; /* 1.25 */
    b[19] = 0x3D; /* 1.25 */
    b[21] = 128;  /* 2 */
    write_st(tpath("f8a.safetensors"), hdr, a, sizeof a);
    write_st(tpath("f8b.safetensors"), hdr, b, sizeof b);
    REQUIRE(RUN(args_of("diff %s %s", tpath("f8a.safetensors"), tpath("f8b.safetensors"))) == 1);
    CHECK(strstr(g_out, "~ f8a") && strstr(g_out, "max abs diff 0.25, 1 of 3 elements differ"));
    CHECK(strstr(g_out, "~ f8b") && strstr(g_out, "max abs diff 0.25, 1 of 2 elements differ"));
    CHECK(strstr(g_out, "~ c ") && strstr(g_out, "max abs diff 0.5, 1 of 1 elements differ"));
    CHECK(strstr(g_out, "~ u ") && strstr(g_out, "max abs diff 3, 1 of 1 elements differ"));
    CHECK(strstr(g_out, "~ e ") && strstr(g_out, "max abs diff 1, 1 of 1 elements differ"));
    CHECK(strstr(g_out, "different: 5 changed, 0 added, 0 removed, 0 identical") != NULL);
    REQUIRE(RUN(args_of("inspect --flat %s%s", tpath("f8a.safetensors"), "")) == 0);
    CHECK(strstr(g_out, "float8_e4m3fn") && strstr(g_out, "float8_e5m2") && strstr(g_out, "float8_e8m0fnu") &&
          strstr(g_out, "complex64") && strstr(g_out, "uint64"));
    /* through DCP (torch items of both storage forms) and back: same names, same bytes */
    REQUIRE(RUN(args_of("convert %s %s --to dcp --ranks 2", tpath("f8a.safetensors"), tpath("f8dcp"))) == 0);
    REQUIRE(RUN(args_of("convert %s %s", tpath("f8dcp"), tpath("f8back.safetensors"))) == 0);
    REQUIRE(RUN(args_of("diff %s %s", tpath("f8a.safetensors"), tpath("f8back.safetensors"))) == 0);
    REQUIRE(RUN(args_of("inspect --json %s%s", tpath("f8back.safetensors"), "")) == 0);
    CHECK(strstr(g_out, "\"dtype\":\"float8_e8m0fnu\"") && strstr(g_out, "\"dtype\":\"complex64\"") &&
          strstr(g_out, "\"key\":\"u\",\"kind\":\"tensor\",\"nbytes\":8"));
}

TEST(cli_verify_passes_a_good_checkpoint_and_names_a_corrupt_item) {
    fixture f;
    const char *dir = tpath("ckv");
    make_fixture(&f, dir);
    CHECK(RUN(args_of("verify '%s'%s", dir, "")) == 0);
    /* Flip one payload byte of the 2x6 float block rank 1 wrote (its file holds only its own boxes). */
    char data[PATH_MAX];
    snprintf(data, sizeof data, "%s/__1_0.distcp", dir);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long ei = sck_ckpt_find(ck, "model.layers.0.weight");
    REQUIRE(ei >= 0);
    sck_chunk_info ci;
    int found = 0;
    for (size_t j = 0; !found && sck_ckpt_chunk(ck, (size_t)ei, j, &ci) == SCK_OK; j++) found = !strcmp(ci.file, "__1_0.distcp");
    sck_ckpt_close(ck);
    REQUIRE(found);
    FILE *fp = fopen(data, "r+b");
    REQUIRE(fp);
    /* a byte in the middle of the item: every byte of it is covered by the item's CRC-32C */
    long pos = (long)(ci.offset + ci.length / 2);
    fseek(fp, pos, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, pos, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
    CHECK(RUN(args_of("verify '%s'%s", dir, "")) == 1);
    CHECK(strstr(g_err, "__1_0.distcp") != NULL);
    CHECK(strstr(g_err, "model.layers.0.weight") != NULL);
}

/* ---- convert: existing outputs and --force ---- */

/* For each output kind: a second convert into it is refused (naming the path and --force) and leaves
 * it byte for byte as it was; with --force it holds the new checkpoint and no temporary file is left;
 * --force never replaces an output of another kind. */
TEST(cli_convert_refuses_an_existing_output_unless_forced) {
    fixture f, g;
    make_fixture(&f, tpath("ck"));
    make_variant(&g, tpath("var"));
    const char *to[3] = {"dcp", "safetensors", "hf"}, *out[3] = {tpath("o_dcp"), tpath("o.safetensors"), tpath("o_hf")};
    const char *marker[3] = {".metadata", "", "model.safetensors.index.json"};
    for (int k = 0; k < 3; k++) {
        char a[PATH_MAX * 2 + 64], m[PATH_MAX], ref[PATH_MAX];
        snprintf(a, sizeof a, "convert %s %s --to %s", f.dir, out[k], to[k]);
        REQUIRE(RUN(a) == 0);
        snprintf(m, sizeof m, "%s%s%s", out[k], k == 1 ? "" : "/", marker[k]);
        snprintf(ref, sizeof ref, "%s.ref", out[k]);
        uint8_t *d;
        size_t n;
        REQUIRE_OK(sck_read_file(m, &d, &n));
        FILE *fp = fopen(ref, "wb");
        REQUIRE(fp && fwrite(d, 1, n, fp) == n);
        fclose(fp);
        free(d);
        snprintf(a, sizeof a, "convert %s %s --to %s", g.dir, out[k], to[k]);
        CHECK(RUN(a) == 1);
        CHECK(strstr(g_err, out[k]) && strstr(g_err, "already exists") && strstr(g_err, "pass --force"));
        CHECK(file_equal(m, ref));
        CHECK(RUN(args_of("diff %s %s", f.dir, out[k])) == 0);
        snprintf(a, sizeof a, "convert %s %s --to %s --force", g.dir, out[k], to[k]);
        CHECK(RUN(a) == 0);
        CHECK(RUN(args_of("diff %s %s", g.dir, out[k])) == 0);
        CHECK(strstr(g_out, "identical") != NULL);
        snprintf(m, sizeof m, "%s.tmp", out[k]);
        CHECK(access(m, F_OK) != 0);
        /* another kind is not replaced, even with --force */
        snprintf(a, sizeof a, "convert %s %s --to %s --force", f.dir, out[k], to[(k + 1) % 3]);
        CHECK(RUN(a) == 1);
        CHECK(strstr(g_err, out[k]) && strstr(g_err, "same kind"));
        CHECK(RUN(args_of("diff %s %s", g.dir, out[k])) == 0);
    }
    /* an empty directory is no output yet; a directory of other files is never replaced */
    const char *empty = tpath("empty"), *other = tpath("other");
    REQUIRE(mkdir(empty, 0755) == 0 && mkdir(other, 0755) == 0);
    CHECK(RUN(args_of("convert %s %s --to hf", f.dir, empty)) == 0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/notes.txt", other);
    FILE *fp = fopen(p, "w");
    REQUIRE(fp != NULL);
    fclose(fp);
    CHECK(RUN(args_of("convert %s %s --to hf --force", f.dir, other)) == 1);
    CHECK(strstr(g_err, "is a directory, not what --to hf writes") != NULL);
    CHECK(access(p, F_OK) == 0);
}

/* ---- convert: --include / --exclude / --strip-prefix ---- */

/* "k1,k2,..." of the entries of path, in its order. */
static void keys_of(const char *path, char *buf, size_t cap) {
    sck_ckpt *ck;
    buf[0] = 0;
    if (sck_ckpt_open(path, &ck)) {
        th_fail(__FILE__, __LINE__, sck_last_error());
        return;
    }
    for (size_t i = 0; i < sck_ckpt_count(ck); i++) {
        sck_entry_info e;
        if (sck_ckpt_entry(ck, i, &e) == 0) snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", e.key);
    }
    sck_ckpt_close(ck);
}

TEST(cli_convert_selects_and_renames_keys) {
    fixture f;
    make_fixture(&f, tpath("ck"));
    const char *st = tpath("sel.safetensors"), *st2 = tpath("sel2.safetensors"), *hf = tpath("selhf");
    const char *sel = "--include 'model.*' --exclude '*.mask' --exclude 'model.ids' --strip-prefix model.";
    char a[PATH_MAX * 2 + 256], keys[1024];
    snprintf(a, sizeof a, "convert %s %s %s", f.dir, st, sel);
    REQUIRE(RUN(a) == 0);
    keys_of(st, keys, sizeof keys);
    CHECK(!strcmp(keys, "layers.0.half,layers.0.weight,norm.bf16"));
    /* the ranks engine and the HF layout select the same */
    snprintf(a, sizeof a, "convert %s %s %s --ranks 2", f.dir, st2, sel);
    REQUIRE(RUN(a) == 0);
    CHECK(file_equal(st, st2));
    snprintf(a, sizeof a, "convert %s %s --to hf %s --max-shard-size 40B", f.dir, hf, sel);
    REQUIRE(RUN(a) == 0);
    keys_of(hf, keys, sizeof keys);
    CHECK(!strcmp(keys, "layers.0.half,layers.0.weight,norm.bf16"));
    /* the bytes are the source's */
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(hf, &ck));
    float w[4][6];
    uint16_t bf[3];
    int64_t o[2] = {0, 0}, s[2] = {4, 6}, s3[1] = {3};
    CHECK_OK(sck_ckpt_read_box(ck, (size_t)sck_ckpt_find(ck, "layers.0.weight"), o, s, w));
    CHECK_OK(sck_ckpt_read_box(ck, (size_t)sck_ckpt_find(ck, "norm.bf16"), o, s3, bf));
    CHECK(!memcmp(w, f.w, sizeof w) && !memcmp(bf, f.bf, sizeof bf));
    sck_ckpt_close(ck);
    /* keys without the prefix keep their name; values are selected too */
    snprintf(a, sizeof a, "convert %s %s --exclude 'model.*' --strip-prefix model.", f.dir, tpath("rest.safetensors"));
    REQUIRE(RUN(a) == 0);
    CHECK(RUN(args_of("inspect %s --flat%s", tpath("rest.safetensors"), "")) == 0);
    CHECK(strstr(g_out, "other.step") && strstr(g_out, "other.rng") && !strstr(g_out, "model."));
    /* two keys that end up with one name */
    const char *hdr = "{\"model.a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
    write_st(tpath("two.safetensors"), hdr, "\x01\x02", 2);
    snprintf(a, sizeof a, "convert %s %s --strip-prefix model.", tpath("two.safetensors"), tpath("bad.safetensors"));
    CHECK(RUN(a) == 1);
    CHECK(strstr(g_err, "'a' and 'model.a' would both be named 'a'") != NULL);
    CHECK(access(tpath("bad.safetensors"), F_OK) != 0);
    /* selection is for exports */
    CHECK(RUN(args_of("convert %s %s --to dcp --include 'model.*'", f.dir, tpath("d"))) == 2);
}

/* ---- inspect of torch.save .pt files ---- */

/* A torch.save archive "t/" of data.pkl `pkl` and, if payload, one storage data/0. */
static void write_pt(const char *path, const sck_buf *pkl, const void *payload, size_t n) {
    zip_entry e[3];
    size_t ne;
    ti_entries(e, &ne, pkl, sck_crc32(0, pkl->data, pkl->len), payload, n, payload ? sck_crc32(0, payload, n) : 0);
    sck_buf z;
    sck_buf_init(&z);
    FILE *fp = fopen(path, "wb");
    if (zip_build_mem(&z, e, ne, "t", 64) || !fp || fwrite(z.data, 1, z.len, fp) != z.len) th_fail(__FILE__, __LINE__, "write_pt");
    if (fp) fclose(fp);
    sck_buf_free(&z);
}

TEST(cli_inspect_of_a_torch_save_file) {
    sck_buf pkl;
    sck_buf_init(&pkl);
    int64_t shape[2] = {2, 3};
    float w[6] = {0};
    REQUIRE_OK(ti_encode_tensor_pkl(&pkl, SCK_F32, 2, shape));
    write_pt(tpath("w.pt"), &pkl, w, sizeof w);
    CHECK(RUN(args_of("inspect %s%s", tpath("w.pt"), "")) == 0);
    CHECK(strstr(g_out, "torch.save archive (t/), 1 tensors (24 B), 0 values") &&
          strstr(g_out, "(root)  float32 [2, 3]  24 B  (storage data/0, offset 0)"));
    /* a storage smaller than the tensor it backs is refused by key */
    write_pt(tpath("short.pt"), &pkl, w, 8);
    CHECK(RUN(args_of("inspect %s%s", tpath("short.pt"), "")) == 1);
    CHECK(strstr(g_err, "storage t/data/0 holds 8 bytes, 24 declared") != NULL);
    /* plain values by key path */
    sck_value *d = sck_value_dict(), *l = sck_value_list();
    REQUIRE(d && l);
    CHECK_OK(sck_value_list_append(l, sck_value_string("x")));
    CHECK_OK(sck_value_list_append(l, sck_value_float(0.1)));
    CHECK_OK(sck_value_dict_set(d, "step", sck_value_int(-4)));
    CHECK_OK(sck_value_dict_set(d, "cfg", l));
    pkl.len = 0;
    REQUIRE_OK(ti_encode_value_pkl(&pkl, d));
    sck_value_free(d);
    write_pt(tpath("v.pt"), &pkl, NULL, 0);
    CHECK(RUN(args_of("inspect %s%s", tpath("v.pt"), "")) == 0);
    CHECK(strstr(g_out, "0 tensors (0 B), 3 values") && strstr(g_out, "  step = -4  (int)") &&
          strstr(g_out, "  cfg.0 = 'x'  (str)") && strstr(g_out, "  cfg.1 = 0.1  (float)"));
    /* a pickle calling os.system is refused by name and never run */
    sck_buf_free(&pkl);
    const char evil[] = "\x80\x02" "cos\nsystem\n" "X\x04\x00\x00\x00" "true\x85R.";
    sck_buf e = {(uint8_t *)evil, sizeof evil - 1, sizeof evil - 1};
    write_pt(tpath("evil.pt"), &e, NULL, 0);
    CHECK(RUN(args_of("inspect %s%s", tpath("evil.pt"), "")) == 1);
    CHECK(strstr(g_err, "evil.pt: t/data.pkl") && strstr(g_err, "global os.system is not allowed"));
}

/* ---- __metadata__ strings of a foreign safetensors file ---- */

typedef struct md_string {
    const char *key, *text;
    size_t n;
} md_string;

#define MD(k, s) {k, s, sizeof s - 1}
static const md_string g_foreign[] = {
    MD("lr", "{\"lr\": 0.1}"), MD("n", "3"), MD("note", "not json {"), MD("t", "true"), MD("e", ""),
    MD("u", "\xc3\xa9 tab\t nul\0 q\" bs\\"),
};
static const char g_foreign_hdr[] =
    "{\"__metadata__\":{\"lr\":\"{\\\"lr\\\": 0.1}\",\"n\":\"3\",\"note\":\"not json {\",\"t\":\"true\",\"e\":\"\","
    "\"u\":\"\\u00e9 tab\\t nul\\u0000 q\\\" bs\\\\\"%s},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

/* 1 if the first file of `path` (a file, or an HF directory's first shard) holds exactly the foreign
 * strings plus "format": `format`, nothing else. */
static int has_foreign_strings(const char *path, const char *format) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s%s", path, strstr(path, ".safetensors") ? "" : "/model-00001-of-00001.safetensors");
    st_header h;
    if (st_read_header_file(p, &h) != SCK_OK) return 0;
    size_t nf = sizeof g_foreign / sizeof g_foreign[0], n;
    int ok = h.metadata && sck_value_len(h.metadata) == nf + 1;
    const char *fmt = sck_value_get_string(sck_value_dict_get(h.metadata, "format"), &n);
    ok = ok && fmt && n == strlen(format) && !memcmp(fmt, format, n);
    for (size_t i = 0; ok && i < nf; i++) {
        const char *s = sck_value_get_string(sck_value_dict_get(h.metadata, g_foreign[i].key), &n);
        ok = s && n == g_foreign[i].n && !memcmp(s, g_foreign[i].text, n);
        if (!ok) fprintf(stderr, "  %s: __metadata__ '%s' changed\n", p, g_foreign[i].key);
    }
    st_header_free(&h);
    return ok;
}

TEST(cli_convert_keeps_foreign_metadata_strings_and_diff_compares_them) {
    char a[1024], b[1024], np[1024], hdr[1024];   /* copies: tpath() reuses its buffers */
    snprintf(a, sizeof a, "%s", tpath("fa.safetensors"));
    float w[2] = {1.5f, -2.0f};
    snprintf(hdr, sizeof hdr, g_foreign_hdr, "");
    write_st(a, hdr, w, sizeof w);
    /* safetensors -> safetensors (streamed, by 2 ranks) and -> HF; HF -> safetensors; and through DCP */
    static const char *const outs[][3] = {   /* SRC, DST (names in the temporary directory), options */
        {"fa.safetensors", "f1.safetensors", ""}, {"fa.safetensors", "f2.safetensors", "--ranks 2"},
        {"fa.safetensors", "fhf", "--to hf"}, {"fhf", "f3.safetensors", ""}, {"fa.safetensors", "fdcp", "--to dcp --ranks 2"},
        {"fdcp", "f4.safetensors", ""}, {"fdcp", "fhf2", "--to hf --ranks 3"},
    };
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        char args[3 * PATH_MAX + 64], dst[1024];
        snprintf(dst, sizeof dst, "%s", tpath(outs[i][1]));
        snprintf(args, sizeof args, "convert %s %s %s", tpath(outs[i][0]), dst, outs[i][2]);
        int st = RUN(args);
        if (st) fprintf(stderr, "  $ %s\n  %s", args, g_err);
        REQUIRE(st == 0);
        if (!strstr(outs[i][2], "dcp")) CHECK(has_foreign_strings(dst, "pt"));
        CHECK(RUN(args_of("diff %s %s", a, dst)) == 0);
        CHECK(strstr(g_out, "identical: 0 changed, 0 added, 0 removed, 7 identical") != NULL);
    }
    /* in DCP a string is a string value: "3" stays "3" */
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(tpath("fdcp"), &ck));
    void *raw = NULL;
    size_t rn = 0;
    sck_value *v = NULL;
    REQUIRE_OK(sck_ckpt_read_bytes(ck, (size_t)sck_ckpt_find(ck, "n"), &raw, &rn, &v));
    CHECK(sck_value_kind_of(v) == SCK_VAL_STRING && !strcmp(sck_value_get_string(v, NULL), "3"));
    sck_value_free(v);
    free(raw);
    sck_ckpt_close(ck);
    /* one byte of one string differs: diff names the key and the byte */
    snprintf(b, sizeof b, "%s", tpath("fb.safetensors"));
    snprintf(hdr, sizeof hdr, g_foreign_hdr, "");
    char *sp = strstr(hdr, ": 0.1");
    REQUIRE(sp != NULL);
    memmove(sp + 1, sp + 2, strlen(sp + 2) + 1);   /* {"lr": 0.1} -> {"lr":0.1} */
    write_st(b, hdr, w, sizeof w);
    CHECK(RUN(args_of("diff %s %s", a, b)) == 1);
    CHECK(strstr(g_out, "~ lr") && strstr(g_out, "(text differs from byte 6)"));
    CHECK(strstr(g_out, "different: 1 changed, 0 added, 0 removed, 6 identical") != NULL);
    /* a file's own format tag is kept, also through DCP */
    snprintf(np, sizeof np, "%s", tpath("fnp.safetensors"));
    snprintf(hdr, sizeof hdr, g_foreign_hdr, ",\"format\":\"np\"");
    write_st(np, hdr, w, sizeof w);
    REQUIRE(RUN(args_of("convert %s %s --to dcp", np, tpath("fnpdcp"))) == 0);
    REQUIRE(RUN(args_of("convert %s %s", tpath("fnpdcp"), tpath("fnp2.safetensors"))) == 0);
    CHECK(has_foreign_strings(tpath("fnp2.safetensors"), "np"));
    CHECK(RUN(args_of("diff %s %s", a, np)) == 1);
    CHECK(strstr(g_out, "+ format") != NULL);
}
