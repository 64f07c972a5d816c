/* test_full.c - sck_save_full: consolidated safetensors files and Hugging Face sharded directories
 * written from 1..4 thread ranks under several shardings, checked byte by byte with the header
 * parser and raw preads, loaded back into other shardings, errors agreed across ranks, and the
 * load path reading only each rank's slice. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/box.h"
#include "ckpt_fixture.h"
#include "harness.h"
#include "io/io_hook.h"
#include "format/safetensors.h"
#include "save/save_full.h"
#include "format/st_out.h"
#include "io/storage.h"

#define FT 8

typedef struct ftensor {
    const char *key;
    sck_dtype dt;
    int ndim;
    int64_t shape[4];
    uint8_t *data;
    size_t nbytes;
} ftensor;

/* Deliberately not in key order: the output must be sorted anyway. */
static ftensor F[FT] = {
    {"model.layers.1.w", SCK_F32, 2, {13, 7}, NULL, 0},
    {"model.layers.0.w", SCK_BF16, 2, {6, 10}, NULL, 0},
    {"model.emb", SCK_F16, 3, {5, 4, 3}, NULL, 0},
    {"model.ids", SCK_I64, 1, {17}, NULL, 0},
    {"model.mask", SCK_BOOL, 2, {3, 9}, NULL, 0},
    {"optim.scale", SCK_F64, 0, {0}, NULL, 0},
    {"optim.i8", SCK_I8, 2, {4, 4}, NULL, 0},
    {"model.empty", SCK_I32, 2, {0, 5}, NULL, 0},
};

static void make_ftensors(void) {
    for (int t = 0; t < FT; t++) {
        if (F[t].data) continue;
        uint64_t n = 1;
        for (int d = 0; d < F[t].ndim; d++) n *= (uint64_t)F[t].shape[d];
        F[t].nbytes = n * sck_dtype_size(F[t].dt);
        F[t].data = malloc(F[t].nbytes + 1);
        th_fill(F[t].data, F[t].nbytes, (uint64_t)t + 101);
        if (F[t].dt == SCK_BOOL)
            for (size_t i = 0; i < F[t].nbytes; i++) F[t].data[i] &= 1;
    }
}

static sck_box full_box(const ftensor *g) {
    sck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = g->ndim;
    for (int d = 0; d < g->ndim; d++) b.size[d] = g->shape[d];
    return b;
}

static void *extract_box(const ftensor *g, const sck_box *b) {
    sck_box full = full_box(g);
    size_t elem = sck_dtype_size(g->dt);
    void *p = malloc(box_numel(b) * elem + 1);
    box_copy(p, b, g->data, &full, NULL, b, elem);
    return p;
}

enum { DIM0, LASTDIM, FLATR, REPLICATED, GRID };

/* The boxes rank r of n holds under `style` (GRID: 2-d tensors split in both dims over 2x2). */
static int style_boxes(const ftensor *g, int style, int r, int n, sck_box *out) {
    sck_box b = full_box(g);
    if (g->ndim == 0 || style == REPLICATED) {
        out[0] = b;
        return 1;
    }
    if (style == FLATR) {
        uint64_t numel = box_numel(&b);
        int64_t per = (int64_t)((numel + (uint64_t)n - 1) / (uint64_t)n);
        int64_t lo = per * r < (int64_t)numel ? per * r : (int64_t)numel;
        int64_t hi = per * (r + 1) < (int64_t)numel ? per * (r + 1) : (int64_t)numel;
        int k = box_from_flat(g->ndim, g->shape, lo, hi - lo, out);
        if (k == 0) out[k++] = (sck_box){g->ndim, {0}, {0}}; /* an empty box still names the key */
        return k;
    }
    if (style == GRID && g->ndim >= 2 && n == 4) {
        for (int k = 0; k < 2; k++) {
            int part = k == 0 ? r / 2 : r % 2;
            int64_t len = g->shape[k], h = (len + 1) / 2;
            b.off[k] = part ? h : 0;
            b.size[k] = part ? len - h : h;
        }
        out[0] = b;
        return 1;
    }
    int d = style == LASTDIM ? g->ndim - 1 : 0;
    int64_t len = g->shape[d], per = (len + n - 1) / n;
    b.off[d] = per * r < len ? per * r : len;
    b.size[d] = (per * (r + 1) < len ? per * (r + 1) : len) - b.off[d];
    out[0] = b;
    return 1;
}

typedef struct fjob {
    const char *path;
    int style;
    int nt;                  /* tensors used: F[0..nt) */
    sck_full_opts opts;
    int with_values;
    int hole;                /* rank 0 leaves out its box of model.layers.1.w */
    const char *extra_value; /* a value key added by every rank */
    int rcs[8];
    char msgs[8][512];
    int failures;
} fjob;

static void add_values(sck_state *st, int r) {
    sck_value *v = sck_value_dict();
    sck_value_dict_set(v, "step", sck_value_int(4242));
    sck_value_dict_set(v, "name", sck_value_string("run \"q\" \xc3\xa9"));
    sck_state_add_value(st, "other.meta", v);
    sck_state_add_value(st, "other.epoch", sck_value_int(3 + r)); /* lowest rank's copy wins: 3 */
    uint8_t blob[40];
    for (int i = 0; i < 40; i++) blob[i] = (uint8_t)(i * 13);
    sck_state_add_blob(st, "other.rng", blob, sizeof blob);
}

static int full_save_rank(sck_comm *comm, void *arg) {
    fjob *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    sck_state *st = sck_state_new();
    void *bufs[FT * 2 * SCK_MAX_DIMS];
    int nb = 0, rc = 0;
    for (int t = 0; t < j->nt && !rc; t++) {
        sck_box boxes[2 * SCK_MAX_DIMS];
        int style = j->style;
        int k = style_boxes(&F[t], style, r, n, boxes);
        for (int i = 0; i < k && !rc; i++) {
            if (j->hole && r == 0 && t == 0) continue;
            bufs[nb] = extract_box(&F[t], &boxes[i]);
            if (style == REPLICATED || F[t].ndim == 0)
                rc = sck_state_add_replicated(st, F[t].key, F[t].dt, F[t].ndim, F[t].shape, bufs[nb]);
            else
                rc = sck_state_add_box(st, F[t].key, F[t].dt, F[t].ndim, F[t].shape, boxes[i].off, boxes[i].size, bufs[nb]);
            nb++;
        }
    }
    if (j->with_values) add_values(st, r);
    if (j->extra_value) sck_state_add_value(st, j->extra_value, sck_value_int(1));
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_save_full(comm, j->path, st, &j->opts);
    j->rcs[r] = rc;
    snprintf(j->msgs[r], sizeof j->msgs[r], "%s", sck_last_error());
    for (int i = 0; i < nb; i++) free(bufs[i]);
    sck_state_free(st);
    return rc;
}

/* Loads every tensor under `style` on n ranks from `path` and compares with F. */
static int full_load_rank(sck_comm *comm, void *arg) {
    fjob *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    sck_state *st = sck_state_new();
    void *bufs[FT * 2 * SCK_MAX_DIMS];
    sck_box bx[FT * 2 * SCK_MAX_DIMS];
    int owner[FT * 2 * SCK_MAX_DIMS];
    int nb = 0, rc = 0;
    for (int t = 0; t < j->nt && !rc; t++) {
        sck_box boxes[2 * SCK_MAX_DIMS];
        int k = style_boxes(&F[t], j->style, r, n, boxes);
        for (int i = 0; i < k && !rc; i++) {
            bufs[nb] = calloc(box_numel(&boxes[i]) * sck_dtype_size(F[t].dt) + 1, 1);
            bx[nb] = boxes[i];
            owner[nb] = t;
            if (j->style == REPLICATED || F[t].ndim == 0)
                rc = sck_state_add_replicated(st, F[t].key, F[t].dt, F[t].ndim, F[t].shape, bufs[nb]);
            else
                rc = sck_state_add_box(st, F[t].key, F[t].dt, F[t].ndim, F[t].shape, boxes[i].off, boxes[i].size, bufs[nb]);
            nb++;
        }
    }
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_load(comm, j->path, st, NULL);
    for (int i = 0; i < nb && !rc; i++) {
        void *want = extract_box(&F[owner[i]], &bx[i]);
        if (memcmp(want, bufs[i], box_numel(&bx[i]) * sck_dtype_size(F[owner[i]].dt)))
            __atomic_add_fetch(&j->failures, 1, __ATOMIC_SEQ_CST);
        free(want);
    }
    for (int i = 0; i < nb; i++) free(bufs[i]);
    sck_state_free(st);
    return rc;
}

/* Independent check of one file: header parsed, every tensor's bytes equal to F, returns the count. */
static int check_file_tensors(const char *path, int *bad) {
    st_header h;
    if (st_read_header_file(path, &h) != SCK_OK) {
        fprintf(stderr, "  %s: %s\n", path, sck_last_error());
        (*bad)++;
        return 0;
    }
    int fd = open(path, O_RDONLY);
    for (size_t i = 0; i < h.n; i++) {
        int t = -1;
        for (int k = 0; k < FT; k++)
            if (!strcmp(F[k].key, h.t[i].name)) t = k;
        if (t < 0 || h.t[i].dtype != F[t].dt || h.t[i].ndim != F[t].ndim ||
            memcmp(h.t[i].shape, F[t].shape, (size_t)F[t].ndim * 8) || h.t[i].end - h.t[i].begin != F[t].nbytes) {
            fprintf(stderr, "  %s: tensor %s has the wrong name/dtype/shape\n", path, h.t[i].name);
            (*bad)++;
            continue;
        }
        uint8_t *got = malloc(F[t].nbytes + 1);
        if (pread(fd, got, F[t].nbytes, (off_t)(h.data_start + h.t[i].begin)) != (ssize_t)F[t].nbytes ||
            memcmp(got, F[t].data, F[t].nbytes)) {
            fprintf(stderr, "  %s: tensor %s bytes differ\n", path, h.t[i].name);
            (*bad)++;
        }
        free(got);
    }
    /* data section 8-byte aligned, as the reference writer pads it */
    if (h.data_start % 8) (*bad)++;
    close(fd);
    int n = (int)h.n;
    st_header_free(&h);
    return n;
}

static const char *fpath(const char *name) {
    static char p[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", th_tmpdir(), name);
    return p[k];
}

static int count_dir(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        n += l >= s && !strcmp(de->d_name + l - s, suffix);
    }
    closedir(d);
    return n;
}

TEST(full_save_single_file_1_to_4_ranks_every_sharding) {
    make_ftensors();
    const int styles[] = {DIM0, LASTDIM, FLATR, REPLICATED, GRID};
    for (int n = 1; n <= 4; n++) {
        for (int s = 0; s < 5; s++) {
            if (styles[s] == GRID && n != 4) continue;
            fjob j;
            memset(&j, 0, sizeof j);
            j.path = fpath("full.safetensors");
            j.style = styles[s];
            j.nt = FT;
            j.with_values = 1;
            REQUIRE_OK(sck_threads_run(n, full_save_rank, &j));
            int bad = 0;
            CHECK(check_file_tensors(j.path, &bad) == FT);
            CHECK(bad == 0);
            if (bad) fprintf(stderr, "  %d ranks, style %d\n", n, styles[s]);
            CHECK(access(fpath("full.safetensors.tmp"), F_OK) != 0);
            /* values in __metadata__ as JSON text, "format": "pt" beside them */
            st_header h;
            REQUIRE_OK(st_read_header_file(j.path, &h));
            REQUIRE(h.metadata != NULL);
            CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(h.metadata, "format"), NULL), "pt"));
            CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(h.metadata, "other.epoch"), NULL), "3"));
            CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(h.metadata, "other.meta"), NULL),
                          "{\"step\":4242,\"name\":\"run \\\"q\\\" \xc3\xa9\"}"));
            /* the keys of JSON text are named, so a reader tells them from foreign strings */
            CHECK(!strcmp(sck_value_get_string(sck_value_dict_get(h.metadata, "shardckpt.json_keys"), NULL),
                          "[\"other.epoch\",\"other.meta\",\"other.rng\"]"));
            CHECK(sck_value_len(h.metadata) == 5);
            st_header_free(&h);
            /* and back into another sharding with a different world size */
            fjob l = j;
            l.style = styles[(s + 1) % 4];
            l.failures = 0;
            CHECK_OK(sck_threads_run(n % 3 + 1, full_load_rank, &l));
            CHECK(l.failures == 0);
        }
    }
}

TEST(full_save_header_is_sorted_and_exact) {
    make_ftensors();
    fjob j;
    memset(&j, 0, sizeof j);
    j.path = fpath("one.safetensors");
    j.style = DIM0;
    j.nt = 2;
    REQUIRE_OK(sck_threads_run(2, full_save_rank, &j));
    uint8_t *data;
    size_t n;
    REQUIRE_OK(sck_read_file(j.path, &data, &n));
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"model.layers.0.w\":{\"dtype\":\"BF16\",\"shape\":[6,10],\"data_offsets\":[0,120]},"
                       "\"model.layers.1.w\":{\"dtype\":\"F32\",\"shape\":[13,7],\"data_offsets\":[120,484]}}";
    size_t wl = strlen(want), hl = (wl + 7) / 8 * 8;
    REQUIRE(n == 8 + hl + 484);
    CHECK(sck_le64(data) == hl);
    CHECK(!memcmp(data + 8, want, wl));
    for (size_t i = wl; i < hl; i++) CHECK(data[8 + i] == ' ');
    CHECK(!memcmp(data + 8 + hl, F[1].data, 120));
    CHECK(!memcmp(data + 8 + hl + 120, F[0].data, 364));
    free(data);
}

/* Reads model.safetensors.index.json and checks it against the files and F. */
static void check_hf_dir(const char *dir, uint64_t max_shard, int want_files, int nt) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    uint8_t *text;
    size_t n;
    REQUIRE_OK(sck_read_file(p, &text, &n));
    sck_value *idx = NULL;
    REQUIRE_OK(sck_value_from_json((const char *)text, n, &idx));
    free(text);
    const sck_value *wm = sck_value_dict_get(idx, "weight_map");
    uint64_t total = 0;
    for (int t = 0; t < nt; t++) total += F[t].nbytes;
    CHECK(sck_value_get_int(sck_value_dict_get(sck_value_dict_get(idx, "metadata"), "total_size")) == (int64_t)total);
    CHECK(sck_value_len(wm) == (size_t)nt);
    CHECK(count_dir(dir, ".safetensors") == want_files);
    CHECK(count_dir(dir, ".tmp") == 0);
    int seen = 0, bad = 0;
    for (int f = 1; f <= want_files; f++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", f, want_files);
        snprintf(p, sizeof p, "%s/%s", dir, name);
        int k = check_file_tensors(p, &bad);
        seen += k;
        /* every tensor the index maps to this file is in it, and the shard respects the cap */
        st_header h;
        REQUIRE_OK(st_read_header_file(p, &h));
        uint64_t bytes = 0;
        for (size_t i = 0; i < h.n; i++) {
            const sck_value *m = sck_value_dict_get(wm, h.t[i].name);
            CHECK(m && !strcmp(sck_value_get_string(m, NULL), name));
            bytes += h.t[i].end - h.t[i].begin;
        }
        CHECK(bytes <= max_shard || h.n == 1);
        st_header_free(&h);
    }
    CHECK(seen == nt);
    CHECK(bad == 0);
    sck_value_free(idx);
}

TEST(full_save_hf_sharded_several_files_and_load_back) {
    make_ftensors();
    for (int n = 1; n <= 4; n++) {
        fjob j;
        memset(&j, 0, sizeof j);
        j.path = fpath("hf");
        j.style = n == 4 ? GRID : FLATR;
        j.nt = FT;
        j.with_values = 1;
        j.opts.format = SCK_FULL_HF_SHARDED;
        j.opts.max_shard_bytes = 200;
        REQUIRE_OK(sck_threads_run(n, full_save_rank, &j));
        /* key order, 200-byte cap: emb 120 + empty 0 | ids 136 | layers.0.w 120 | layers.1.w 364 | mask 27 + i8 16 + scale 8 */
        check_hf_dir(j.path, 200, 5, FT);
        /* values are in the first shard */
        sck_value *vals = NULL;
        REQUIRE_OK(st_read_values(j.path, &vals));
        CHECK(sck_value_len(vals) == 3);
        CHECK(sck_value_get_int(sck_value_dict_get(vals, "other.epoch")) == 3);
        CHECK(sck_value_get_int(sck_value_dict_get(sck_value_dict_get(vals, "other.meta"), "step")) == 4242);
        const sck_value *rng = sck_value_dict_get(vals, "other.rng");
        CHECK(sck_value_kind_of(rng) == SCK_VAL_BYTES && sck_value_len(rng) == 0);
        size_t bl = 0;
        const uint8_t *b = (const uint8_t *)sck_value_get_string(rng, &bl);
        CHECK(bl == 40 && b[39] == (uint8_t)(39 * 13));
        sck_value_free(vals);
        /* several input files, any sharding */
        fjob l = j;
        l.style = n == 1 ? LASTDIM : DIM0;
        l.failures = 0;
        CHECK_OK(sck_threads_run(5 - n, full_load_rank, &l));
        CHECK(l.failures == 0);
    }
}

TEST(full_save_hf_replaces_a_previous_save) {
    make_ftensors();
    fjob j;
    memset(&j, 0, sizeof j);
    j.path = fpath("hf2");
    j.style = DIM0;
    j.nt = FT;
    j.opts.format = SCK_FULL_HF_SHARDED;
    j.opts.max_shard_bytes = 100;
    REQUIRE_OK(sck_threads_run(2, full_save_rank, &j));
    int before = count_dir(j.path, ".safetensors");
    CHECK(before > 3);
    /* an unrelated file stays */
    char keep[4096];
    snprintf(keep, sizeof keep, "%s/config.json", j.path);
    FILE *f = fopen(keep, "w");
    REQUIRE(f != NULL);
    fputs("{}", f);
    fclose(f);
    j.opts.max_shard_bytes = 0; /* default 5 GB: one shard */
    REQUIRE_OK(sck_threads_run(3, full_save_rank, &j));
    check_hf_dir(j.path, ST_HF_DEFAULT_SHARD, 1, FT);
    CHECK(access(keep, F_OK) == 0);
}

TEST(full_save_tensor_larger_than_staging_limits) {
    /* 3 x 2.1M f32 = 25 MB: beyond the 16 MiB read window and the 4 MiB write stage; split by columns
     * over 3 ranks, so every rank writes 3 runs of ~2.8 MB, and by flat ranges. */
    static ftensor big = {"big.w", SCK_F32, 2, {3, 2100001}, NULL, 0};
    ftensor saved = F[0];
    big.nbytes = 3u * 2100001u * 4u;
    big.data = malloc(big.nbytes);
    th_fill(big.data, big.nbytes, 77);
    F[0] = big;
    const int styles[] = {LASTDIM, FLATR};
    for (int s = 0; s < 2; s++) {
        fjob j;
        memset(&j, 0, sizeof j);
        j.path = fpath("big.safetensors");
        j.style = styles[s];
        j.nt = 1;
        j.opts.flags = SCK_SAVE_NO_FSYNC;
        CHECK_OK(sck_threads_run(3, full_save_rank, &j));
        int bad = 0;
        CHECK(check_file_tensors(j.path, &bad) == 1);
        CHECK(bad == 0);
        fjob l = j;
        l.style = DIM0;
        CHECK_OK(sck_threads_run(2, full_load_rank, &l));
        CHECK(l.failures == 0);
    }
    F[0] = saved;
    free(big.data);
}

static int g_fault_rank;
static const char *g_fault_stage;
static int fault_at(int rank, const char *stage) { return rank == g_fault_rank && !strcmp(stage, g_fault_stage); }

static void check_agreed(const fjob *j, int n, int status, const char *substr) {
    for (int r = 0; r < n; r++) {
        CHECK(j->rcs[r] == status);
        CHECK(!strcmp(j->msgs[r], j->msgs[0]));
    }
    if (!strstr(j->msgs[0], substr)) {
        fprintf(stderr, "  message was: %s (wanted \"%s\")\n", j->msgs[0], substr);
        th_fail(__FILE__, __LINE__, "agreed message");
    }
}

TEST(full_save_errors_are_agreed_and_leave_no_files) {
    make_ftensors();
    /* an existing file survives every failure below unchanged */
    const char *path = fpath("keep.safetensors");
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("old", f);
    fclose(f);
    static const struct { int rank; const char *stage; } faults[] = {
        {2, "plan"}, {0, "create"}, {1, "write"}, {3, "write"}, {0, "commit"},
    };
    for (size_t k = 0; k < sizeof faults / sizeof faults[0]; k++) {
        fjob j;
        memset(&j, 0, sizeof j);
        j.path = path;
        j.style = FLATR;
        j.nt = FT;
        j.with_values = 1;
        g_fault_rank = faults[k].rank;
        g_fault_stage = faults[k].stage;
        save_full_fault = fault_at;
        int rc = sck_threads_run(4, full_save_rank, &j);
        save_full_fault = NULL;
        CHECK(rc == SCK_ERR_IO);
        char want[64];
        snprintf(want, sizeof want, "rank %d: injected fault at %s", faults[k].rank, faults[k].stage);
        check_agreed(&j, 4, SCK_ERR_IO, want);
        CHECK(access(fpath("keep.safetensors.tmp"), F_OK) != 0);
        uint8_t *d;
        size_t n;
        REQUIRE_OK(sck_read_file(path, &d, &n));
        CHECK(n == 3 && !memcmp(d, "old", 3));
        free(d);
    }
    /* HF: a failed write leaves neither shards under final names nor an index */
    fjob h;
    memset(&h, 0, sizeof h);
    h.path = fpath("hf_fail");
    h.style = DIM0;
    h.nt = FT;
    h.opts.format = SCK_FULL_HF_SHARDED;
    h.opts.max_shard_bytes = 150;
    g_fault_rank = 1;
    g_fault_stage = "write";
    save_full_fault = fault_at;
    CHECK(sck_threads_run(3, full_save_rank, &h) == SCK_ERR_IO);
    save_full_fault = NULL;
    check_agreed(&h, 3, SCK_ERR_IO, "rank 1: injected fault at write");
    CHECK(count_dir(h.path, ".safetensors") == 0);
    CHECK(count_dir(h.path, ".tmp") == 0);
    CHECK(count_dir(h.path, ".json") == 0);

    /* a hole in the tensor: the plan refuses it identically everywhere, before any file exists */
    fjob c;
    memset(&c, 0, sizeof c);
    c.path = fpath("hole.safetensors");
    c.style = DIM0;
    c.nt = FT;
    c.hole = 1;
    CHECK(sck_threads_run(3, full_save_rank, &c) == SCK_ERR_COVERAGE);
    check_agreed(&c, 3, SCK_ERR_COVERAGE, "'model.layers.1.w': the shards of all ranks do not cover the whole tensor");
    CHECK(access(c.path, F_OK) != 0);

    /* the parent directory does not exist: rank 0's error reaches every rank */
    c.hole = 0;
    c.path = fpath("no/such/dir.safetensors");
    CHECK(sck_threads_run(2, full_save_rank, &c) == SCK_ERR_IO);
    check_agreed(&c, 2, SCK_ERR_IO, "rank 0: ");
    CHECK(strstr(c.msgs[0], "no/such/dir.safetensors.tmp: cannot create") != NULL);

    /* "format" is reserved for the format tag, a string */
    c.path = fpath("fmt.safetensors");
    c.extra_value = "format";
    CHECK(sck_threads_run(2, full_save_rank, &c) == SCK_ERR_INVALID_ARG);
    check_agreed(&c, 2, SCK_ERR_INVALID_ARG, "the key 'format' is reserved");
    CHECK(access(c.path, F_OK) != 0);

    /* bad options are refused before any collective */
    sck_full_opts o;
    memset(&o, 0, sizeof o);
    o.format = (sck_full_format)7;
    sck_state *st = sck_state_new();
    CHECK_ERR(sck_save_full(NULL, c.path, st, &o), SCK_ERR_INVALID_ARG, "unknown format 7");
    o.format = SCK_FULL_SAFETENSORS;
    o.reserved[2] = 1;
    CHECK_ERR(sck_save_full(NULL, c.path, st, &o), SCK_ERR_INVALID_ARG, "sck_full_opts.reserved[2] is 1, must be 0");
    CHECK_ERR(sck_save_full(NULL, "", st, NULL), SCK_ERR_INVALID_ARG, "empty path");
    sck_state_free(st);
}

/* Every file-system call of a 3-rank full save fails in turn (through io_hook): each failure is
 * reported identically on every rank, the old file stays as it was and no temporary file is left. */
typedef struct io_fail {
    long target, seen;
    char failed_path[4096];
} io_fail;

static int fail_nth(void *ctx, io_kind kind, const char *path) {
    io_fail *f = ctx;
    int hit = __atomic_fetch_add(&f->seen, 1, __ATOMIC_SEQ_CST) == f->target;
    if (hit && getenv("SCK_DEBUG_IO")) fprintf(stderr, "  failing %s %s\n", io_kind_name(kind), path);
    if (hit) snprintf(f->failed_path, sizeof f->failed_path, "%s", path ? path : "");
    return hit ? EIO : 0;
}

TEST(full_save_every_io_call_failing_is_agreed) {
    make_ftensors();
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s", fpath("io.safetensors"));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fjob j;
    memset(&j, 0, sizeof j);
    j.path = path;
    j.style = DIM0;
    j.nt = FT;
    j.with_values = 1;
    io_fail count = {-1, 0, ""};
    io_hook_set(fail_nth, &count);
    int rc = sck_threads_run(3, full_save_rank, &j);
    io_hook_set(NULL, NULL);
    REQUIRE_OK(rc);
    REQUIRE(count.seen > 8);
    for (long k = 0; k < count.seen; k++) {
        FILE *f = fopen(path, "w");
        REQUIRE(f != NULL);
        fputs("old", f);
        fclose(f);
        memset(&j, 0, sizeof j);
        j.path = path;
        j.style = DIM0;
        j.nt = FT;
        j.with_values = 1;
        io_fail fail = {k, 0, ""};
        io_hook_set(fail_nth, &fail);
        rc = sck_threads_run(3, full_save_rank, &j);
        io_hook_set(NULL, NULL);
        if (rc != SCK_ERR_IO) fprintf(stderr, "  I/O call %ld of %ld failing gave %d\n", k, count.seen, rc);
        CHECK(rc == SCK_ERR_IO);
        check_agreed(&j, 3, SCK_ERR_IO, "Input/output error");
        CHECK(access(tmp, F_OK) != 0);
        if (!strcmp(fail.failed_path, th_tmpdir())) {
            /* the directory fsync after the atomic rename: the new file is in place and complete */
            int bad = 0;
            CHECK(check_file_tensors(path, &bad) == FT && bad == 0);
            continue;
        }
        uint8_t *d;
        size_t n;
        REQUIRE_OK(sck_read_file(path, &d, &n));
        CHECK(n == 3 && !memcmp(d, "old", 3));
        free(d);
    }
}

TEST(full_save_hf_every_io_call_failing_leaves_no_index_or_a_whole_one) {
    make_ftensors();
    char dir[4096], idx[4200];
    snprintf(dir, sizeof dir, "%s", fpath("hf_io"));
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    fjob j;
    memset(&j, 0, sizeof j);
    j.path = dir;
    j.style = FLATR;
    j.nt = FT;
    j.opts.format = SCK_FULL_HF_SHARDED;
    j.opts.max_shard_bytes = 200;
    io_fail count = {-1, 0, ""};
    io_hook_set(fail_nth, &count);
    int rc = sck_threads_run(2, full_save_rank, &j);
    io_hook_set(NULL, NULL);
    REQUIRE_OK(rc);
    int failed = 0;
    for (long k = 0; k < count.seen; k++) {
        io_fail fail = {k, 0, ""};
        io_hook_set(fail_nth, &fail);
        rc = sck_threads_run(2, full_save_rank, &j);
        io_hook_set(NULL, NULL);
        failed += rc != SCK_OK;
        CHECK(rc == SCK_OK || rc == SCK_ERR_IO);
        if (rc) check_agreed(&j, 2, SCK_ERR_IO, "Input/output error");
        CHECK(count_dir(dir, ".tmp") == 0);
        /* the index is the commit marker: absent, or naming complete shards */
        if (access(idx, F_OK) == 0) check_hf_dir(dir, 200, 5, FT);
        else CHECK(rc != SCK_OK);
    }
    CHECK(failed >= count.seen - 5); /* only best-effort cleanups may fail silently */
}

TEST(full_save_hf_values_only) {
    fjob j;
    memset(&j, 0, sizeof j);
    j.path = fpath("hf_vals");
    j.nt = 0;
    j.with_values = 1;
    j.opts.format = SCK_FULL_HF_SHARDED;
    REQUIRE_OK(sck_threads_run(2, full_save_rank, &j));
    check_hf_dir(j.path, ST_HF_DEFAULT_SHARD, 1, 0);
    sck_value *vals = NULL;
    REQUIRE_OK(st_read_values(j.path, &vals));
    CHECK(sck_value_len(vals) == 3);
    CHECK(sck_value_get_int(sck_value_dict_get(vals, "other.epoch")) == 3);
    sck_value_free(vals);
}

TEST(full_save_empty_state_writes_a_valid_file) {
    sck_state *st = sck_state_new();
    const char *p = fpath("empty.safetensors");
    REQUIRE_OK(sck_save_full(NULL, p, st, NULL));
    st_header h;
    REQUIRE_OK(st_read_header_file(p, &h));
    CHECK(h.n == 0);
    st_header_free(&h);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(p, &ck));
    CHECK(sck_ckpt_count(ck) == 0);
    sck_ckpt_close(ck);
    sck_state_free(st);
}

/* ---- the load path reads only each rank's slice ---- */

typedef struct rjob {
    const char *path;
    int64_t rows, cols;
    int by_cols;
    uint64_t read[4];
    int bad;
} rjob;

static int slice_load_rank(sck_comm *comm, void *arg) {
    rjob *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t shape[2] = {j->rows, j->cols}, off[2] = {0, 0}, sz[2] = {j->rows, j->cols};
    int d = j->by_cols;
    sz[d] = shape[d] / n;
    off[d] = sz[d] * r;
    float *buf = malloc((size_t)(sz[0] * sz[1]) * 4);
    sck_state *st = sck_state_new();
    int rc = sck_state_add_box(st, "w", SCK_F32, 2, shape, off, sz, buf);
    rc = sck_comm_agree(comm, rc);
    uint64_t before = fx_thread_io("rchar");
    if (!rc) rc = sck_load(comm, j->path, st, NULL);
    j->read[r] = fx_thread_io("rchar") - before;
    for (int64_t i = 0; i < sz[0] * sz[1] && !rc; i++) {
        int64_t gi = (off[0] + i / sz[1]) * j->cols + off[1] + i % sz[1];
        if (buf[i] != (float)gi) {
            __atomic_add_fetch(&j->bad, 1, __ATOMIC_SEQ_CST);
            break;
        }
    }
    free(buf);
    sck_state_free(st);
    return rc;
}

TEST(full_load_each_rank_reads_only_its_slice) {
    REQUIRE(access("/proc/thread-self/io", R_OK) == 0);
    /* 32 MiB tensor written in full by one rank; 4 ranks then load a quarter each, by rows or by
     * columns (1 MiB per row and rank: each run is read straight into the rank's buffer) */
    int64_t rows = 8, cols = 1048576;
    float *w = malloc((size_t)(rows * cols) * 4);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (float)i;
    sck_state *st = sck_state_new();
    int64_t shape[2] = {rows, cols};
    REQUIRE_OK(sck_state_add_replicated(st, "w", SCK_F32, 2, shape, w));
    const char *p = fpath("slice.safetensors");
    sck_full_opts o = {SCK_FULL_SAFETENSORS, SCK_SAVE_NO_FSYNC, 0, {0}};
    REQUIRE_OK(sck_save_full(NULL, p, st, &o));
    sck_state_free(st);
    free(w);
    uint64_t quarter = (uint64_t)(rows * cols) * 4 / 4;
    for (int by_cols = 0; by_cols < 2; by_cols++) {
        rjob j = {p, rows, cols, by_cols, {0}, 0};
        REQUIRE_OK(sck_threads_run(4, slice_load_rank, &j));
        CHECK(j.bad == 0);
        for (int r = 0; r < 4; r++) {
            /* its quarter, plus the header and /proc reads: far less than the 32 MiB file */
            if (j.read[r] < quarter || j.read[r] > quarter + (64u << 10)) {
                fprintf(stderr, "  by_cols=%d rank %d read %llu bytes, its slice is %llu\n", by_cols, r,
                        (unsigned long long)j.read[r], (unsigned long long)quarter);
                th_fail(__FILE__, __LINE__, "rank read more than its slice");
            }
        }
    }
}

/* ---- layout and size parsing ---- */

TEST(full_layout_shards_greedily_in_order) {
    st_tensor t[5];
    memset(t, 0, sizeof t);
    const char *names[5] = {"a", "b", "c", "d", "e"};
    int64_t lens[5] = {10, 10, 30, 0, 5}; /* bytes as U8 */
    for (int i = 0; i < 5; i++) {
        t[i].name = (char *)names[i];
        t[i].dtype = SCK_U8;
        t[i].ndim = 1;
        t[i].shape[0] = lens[i];
    }
    st_layout L;
    REQUIRE_OK(st_layout_build(t, 5, NULL, 1, 20, "/x", &L));
    CHECK(L.nfiles == 3);
    CHECK(L.file_of[0] == 0 && L.file_of[1] == 0 && L.file_of[2] == 1 && L.file_of[3] == 1 && L.file_of[4] == 2);
    CHECK(!strcmp(L.files[2].name, "model-00003-of-00003.safetensors"));
    CHECK(L.total_size == 55);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(st_index_json(&L, &b));
    const char *want = "{\n  \"metadata\": {\n    \"total_size\": 55\n  },\n  \"weight_map\": {\n"
                       "    \"a\": \"model-00001-of-00003.safetensors\",\n"
                       "    \"b\": \"model-00001-of-00003.safetensors\",\n"
                       "    \"c\": \"model-00002-of-00003.safetensors\",\n"
                       "    \"d\": \"model-00002-of-00003.safetensors\",\n"
                       "    \"e\": \"model-00003-of-00003.safetensors\"\n  }\n}\n";
    CHECK(b.len == strlen(want) && !memcmp(b.data, want, b.len));
    sck_buf_free(&b);
    st_layout_free(&L);
    REQUIRE_OK(st_layout_build(t, 5, NULL, 0, 0, "/x.safetensors", &L));
    CHECK(L.nfiles == 1 && L.data_off[2] == L.files[0].header.len + 20);
    st_layout_free(&L);
}

TEST(full_parse_size_units) {
    uint64_t v;
    CHECK(sck_parse_size("5GB", &v) == 0 && v == 5000000000ull);
    CHECK(sck_parse_size("5gb", &v) == 0 && v == 5000000000ull);
    CHECK(sck_parse_size("1.5GiB", &v) == 0 && v == 1610612736ull);
    CHECK(sck_parse_size("500MB", &v) == 0 && v == 500000000ull);
    CHECK(sck_parse_size("64KiB", &v) == 0 && v == 65536);
    CHECK(sck_parse_size("4096", &v) == 0 && v == 4096);
    CHECK(sck_parse_size("10M", &v) == 0 && v == 10000000);
    CHECK(sck_parse_size("0", &v) == -1);
    CHECK(sck_parse_size("-5GB", &v) == -1);
    CHECK(sck_parse_size("5XB", &v) == -1);
    CHECK(sck_parse_size("", &v) == -1);
    CHECK(sck_parse_size("1e30", &v) == -1);
}
