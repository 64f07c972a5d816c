/* test_hostile.c - hostile checkpoints end to end, through sck_ckpt_open / sck_load /
 * sck_ckpt_verify on crafted directories: each must be refused with a clear error naming what is wrong,
 * never crash, hang, allocate absurdly or read out of bounds (the suite also runs under ASan+UBSan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "format/dcp_meta.h"
#include "harness.h"
#include "format/safetensors.h"

/* dir/.metadata := the given pickle bytes (dir created). */
static void put_metadata(const char *dir, const void *p, size_t n) {
    char path[4200];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/.metadata", dir);
    CHECK(fx_write(path, p, n) == 0);
}

/* Open and load must both fail with `st` and a message containing `msg`. */
typedef struct ranks_load {
    const char *dir;
    int rc[3];
    char msg[3][512];
} ranks_load;

static int load_rank(sck_comm *c, void *arg) {
    ranks_load *l = arg;
    int r = sck_comm_rank(c);
    sck_state *s = sck_state_new();
    sck_load_opts o = {SCK_LOAD_ALLOW_MISSING, {0}, 0};
    l->rc[r] = sck_load(c, l->dir, s, &o);
    snprintf(l->msg[r], sizeof l->msg[r], "%s", sck_last_error());
    sck_state_free(s);
    return l->rc[r];
}

/* Refused by sck_ckpt_open, by a one-process load, and on every rank of a 3-rank load (where rank 0
 * decodes and checks the model and the others take its verdict). */
static void refused(const char *dir, int st, const char *msg) {
    sck_ckpt *ck = NULL;
    int rc = sck_ckpt_open(dir, &ck);
    if (rc != st || !strstr(sck_last_error(), msg)) {
        fprintf(stderr, "  open: got %d (%s), wanted %d with \"%s\"\n", rc, sck_last_error(), st, msg);
        CHECK(0);
    }
    sck_ckpt_close(ck);
    sck_state *s = sck_state_new();
    sck_load_opts o = {SCK_LOAD_ALLOW_MISSING, {0}, 0};
    rc = sck_load(NULL, dir, s, &o);
    if (rc != st || !strstr(sck_last_error(), msg)) {
        fprintf(stderr, "  load: got %d (%s), wanted %d with \"%s\"\n", rc, sck_last_error(), st, msg);
        CHECK(0);
    }
    sck_state_free(s);
    ranks_load l;
    memset(&l, 0, sizeof l);
    l.dir = dir;
    sck_threads_run(3, load_rank, &l);
    for (int r = 0; r < 3; r++) {
        if (l.rc[r] != st || !strstr(l.msg[r], msg)) {
            fprintf(stderr, "  rank %d of 3: got %d (%s), wanted %d with \"%s\"\n", r, l.rc[r], l.msg[r], st, msg);
            CHECK(0);
        }
    }
}

static const char *sub(const char *name) {
    static char p[4096];
    snprintf(p, sizeof p, "%s/%s", th_tmpdir(), name);
    return p;
}

TEST(hostile_metadata_global_os_system_and_builtins_eval) {
    static const char os_system[] = "\x80\x04" "cos\nsystem\n" "(X\x0a\0\0\0touch pwnd" "tR.";
    put_metadata(sub("a"), os_system, sizeof os_system - 1);
    refused(sub("a"), SCK_ERR_UNSUPPORTED, "global os.system is not allowed");
    static const char eval[] = "\x80\x04\x8c\x08" "builtins" "\x8c\x04" "eval" "\x93" "\x8c\x06" "1+1000" "\x85R.";
    put_metadata(sub("b"), eval, sizeof eval - 1);
    refused(sub("b"), SCK_ERR_UNSUPPORTED, "global builtins.eval is not allowed");
    CHECK(access("pwnd", F_OK) != 0);
}

TEST(hostile_metadata_deep_nesting_huge_memo_huge_sizes) {
    size_t n = 200000;
    char *deep = malloc(n + 4);
    REQUIRE(deep);
    deep[0] = '\x80';
    deep[1] = 4;
    for (size_t i = 2; i < n; i += 2) deep[i] = ']', deep[i + 1] = '(';   /* EMPTY_LIST MARK ... */
    deep[n] = '.';
    put_metadata(sub("deep"), deep, n + 1);
    refused(sub("deep"), SCK_ERR_FORMAT, "nested deeper than");
    memset(deep + 2, '(', n - 2);                                            /* MARK MARK MARK ... */
    put_metadata(sub("marks"), deep, n + 1);
    refused(sub("marks"), SCK_ERR_FORMAT, "MARKs nested deeper than");
    free(deep);
    /* LONG_BINPUT to index 4e9: must not size a memo table by the index */
    static const char memo[] = "\x80\x04" "N" "r\x00\x28\x6b\xee" ".";
    put_metadata(sub("memo"), memo, sizeof memo - 1);
    sck_ckpt *ck = NULL;
    int rc = sck_ckpt_open(sub("memo"), &ck);
    CHECK(rc == SCK_ERR_FORMAT || rc == SCK_ERR_UNSUPPORTED);
    CHECK(strstr(sck_last_error(), "/memo/.metadata") != NULL);
    sck_ckpt_close(ck);
    static const char get[] = "\x80\x04" "j\xff\xff\xff\x7f" ".";         /* LONG_BINGET of nothing */
    put_metadata(sub("get"), get, sizeof get - 1);
    refused(sub("get"), SCK_ERR_FORMAT, "memo index 2147483647 not found");
    static const char big_str[] = "\x80\x04" "\x8d\x00\x00\x00\x00\x00\x00\x00\x10" "abc";  /* BINUNICODE8 of 2^60 bytes */
    put_metadata(sub("bigstr"), big_str, sizeof big_str - 1);
    refused(sub("bigstr"), SCK_ERR_FORMAT, "/bigstr/.metadata");
    static const char big_bytes[] = "\x80\x04" "B\xff\xff\xff\xff" "xyz";                  /* BINBYTES of 4 GiB */
    put_metadata(sub("bigbytes"), big_bytes, sizeof big_bytes - 1);
    refused(sub("bigbytes"), SCK_ERR_FORMAT, "/bigbytes/.metadata");
    put_metadata(sub("empty"), "", 0);
    refused(sub("empty"), SCK_ERR_FORMAT, "/empty/.metadata");
}

/* Metadata edits on a real checkpoint (saved by 3 ranks: model.w in row blocks 0-3, 4-7, 8-11). */
typedef struct edit {
    const char *key;
    size_t chunk;
    int what;           /* see edit_fn */
    const char *text;
    int64_t v;
} edit;

enum { SET_FILE, SET_ROW_OFF, SET_ROW_SIZE, SET_ITEM_OFF, SET_ITEM_LEN, SET_SHAPE0 };

static void edit_fn(struct ck_meta *m, void *ctx) {
    const edit *x = ctx;
    long i = ck_meta_find(m, x->key);
    if (i < 0) return;
    ck_entry *e = &m->e[i];
    ck_chunk *c = &e->chunks[x->chunk];
    switch (x->what) {
    case SET_FILE:
        free(m->files[c->file]);
        m->files[c->file] = sck_strdup(x->text);
        break;
    case SET_ROW_OFF: e->dims[2 * (size_t)e->ndim * x->chunk] = x->v; break;
    case SET_ROW_SIZE: e->dims[2 * (size_t)e->ndim * x->chunk + (size_t)e->ndim] = x->v; break;
    case SET_ITEM_OFF: c->offset = (uint64_t)x->v; break;
    case SET_ITEM_LEN: c->length = (uint64_t)x->v; break;
    case SET_SHAPE0: e->shape[0] = x->v; break;
    }
}

static const char *crafted(const char *name, edit x) {
    const char *dir = sub(name);
    if (fx_save(dir, 3, 0, 0, NULL, NULL) != SCK_OK || fx_edit_metadata(dir, edit_fn, &x) != SCK_OK) {
        fprintf(stderr, "  cannot craft %s: %s\n", name, sck_last_error());
        CHECK(0);
    }
    return dir;
}

TEST(hostile_relative_paths_dot_dot_absolute_nested) {
    const char *bad[] = {"../escape.distcp", "/etc/passwd", "sub/__0_0.distcp", "..", ".", ""};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char name[32];
        snprintf(name, sizeof name, "path%zu", k);
        const char *dir = crafted(name, (edit){"model.w", 1, SET_FILE, bad[k], 0});
        char want[128];
        snprintf(want, sizeof want, "relative_path '%s' is not a plain file name", bad[k]);
        refused(dir, SCK_ERR_FORMAT, want);
    }
}

TEST(hostile_data_file_symlink_is_not_followed) {
    const char *dir = sub("link");
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char p[4200];
    snprintf(p, sizeof p, "%s/__1_0.distcp", dir);
    REQUIRE(unlink(p) == 0);
    REQUIRE(symlink("/etc/passwd", p) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "__1_0.distcp: cannot open data file") != NULL);
}

TEST(hostile_overlapping_and_out_of_bounds_chunks) {
    const char *dir = crafted("overlap", (edit){"model.w", 1, SET_ROW_OFF, NULL, 3});
    refused(dir, SCK_ERR_COVERAGE, "tensor 'model.w': saved chunks 0 and 1 overlap");
    dir = crafted("oob", (edit){"model.w", 2, SET_ROW_SIZE, NULL, 5});
    refused(dir, SCK_ERR_FORMAT, "tensor 'model.w' chunk 2 lies outside the tensor");
    dir = crafted("negative", (edit){"model.w", 0, SET_ROW_OFF, NULL, -1});
    refused(dir, SCK_ERR_FORMAT, "tensor 'model.w' chunk 0 lies outside the tensor");
    dir = crafted("huge_shape", (edit){"model.w", 0, SET_SHAPE0, NULL, (int64_t)1 << 62});
    refused(dir, SCK_ERR_FORMAT, "tensor 'model.w' is impossibly large");
}

TEST(hostile_item_offsets_beyond_the_file_and_lying_lengths) {
    const char *dir = crafted("far", (edit){"model.w", 1, SET_ITEM_OFF, NULL, (int64_t)1 << 40});
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "__1_0.distcp: 'model.w' item [1099511627776, +") != NULL);
    CHECK(strstr(sck_last_error(), "extends past the end of the file") != NULL);
    dir = crafted("neg_off", (edit){"model.w", 1, SET_ITEM_OFF, NULL, -5});
    refused(dir, SCK_ERR_FORMAT, "'model.w': _StorageInfo lacks relative_path/offset/length");
    /* A length cut short: the zip inside no longer parses (unchecked), or the checksum differs. */
    dir = crafted("short", (edit){"model.w", 1, SET_ITEM_LEN, NULL, 40});
    CHECK(fx_load_version(dir, SCK_LOAD_NO_VERIFY) == -1);
    CHECK(strstr(sck_last_error(), "__1_0.distcp: 'model.w' item at offset") != NULL);
    CHECK(strstr(sck_last_error(), "end of central directory record not found") != NULL);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "CRC-32C") != NULL);
}

/* A zip central directory claiming data/0 holds 2 GiB. */
TEST(hostile_zip_with_lying_sizes) {
    const char *dir = sub("zip");
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char p[4200];
    snprintf(p, sizeof p, "%s/__1_0.distcp", dir);
    size_t n;
    unsigned char *d = fx_read(p, &n);
    REQUIRE(d);
    int patched = 0;
    for (size_t i = 0; i + 46 + 14 <= n; i++) {
        if (memcmp(d + i, "PK\x01\x02", 4) || memcmp(d + i + 46, "archive/data/0", 14)) continue;
        memcpy(d + i + 20, "\xff\xff\xff\x7f\xff\xff\xff\x7f", 8); /* compressed, uncompressed size */
        patched++;
    }
    CHECK(patched >= 1);
    REQUIRE(fx_write(p, d, n) == 0);
    free(d);
    /* The model cache knows where each payload lies, so a load without checksums reads the payloads
     * and never looks at the lying directory; with checksums the item's bytes are refused. */
    CHECK(fx_load_version(dir, SCK_LOAD_NO_VERIFY) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "CRC-32C") != NULL);
    /* Without the cache (a torch checkpoint) the archives are parsed, and the lie is refused. */
    snprintf(p, sizeof p, "%s/.metadata.sck", dir);
    REQUIRE(remove(p) == 0);
    CHECK(fx_load_version(dir, SCK_LOAD_NO_VERIFY) == -1);
    /* Loads read in file order: the first item of the file is the first refused. */
    CHECK(strstr(sck_last_error(), "__1_0.distcp: 'model.b' item at offset 0: local header of 'archive/data/0'") != NULL);
    CHECK(fx_load_resharded(dir, 2, SCK_LOAD_NO_VERIFY) == SCK_ERR_FORMAT);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "CRC-32C") != NULL);
}

TEST(hostile_safetensors_header_bombs) {
    const char *f = sub("bomb.safetensors");
    unsigned char hdr[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, '{', '}'};
    REQUIRE(fx_write(f, hdr, sizeof hdr) == 0);
    sck_ckpt *ck = NULL;
    CHECK_ERR(sck_ckpt_open(f, &ck), SCK_ERR_FORMAT, "header length 281474976710655");
    sck_ckpt_close(ck);
    /* 100 MB declared, 16 bytes there */
    unsigned char hdr2[16] = {0x00, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};
    REQUIRE(fx_write(f, hdr2, sizeof hdr2) == 0);
    CHECK_ERR(sck_ckpt_open(f, &ck), SCK_ERR_FORMAT, "bomb.safetensors");
    sck_ckpt_close(ck);
    /* deeply nested JSON */
    size_t depth = 100000;
    unsigned char *j = malloc(8 + 2 * depth);
    REQUIRE(j);
    uint64_t len = 2 * depth;
    for (int b = 0; b < 8; b++) j[b] = (unsigned char)(len >> (8 * b));
    memset(j + 8, '[', depth);
    memset(j + 8 + depth, ']', depth);
    REQUIRE(fx_write(f, j, 8 + 2 * depth) == 0);
    free(j);
    CHECK_ERR(sck_ckpt_open(f, &ck), SCK_ERR_FORMAT, "bomb.safetensors");
    sck_ckpt_close(ck);
    /* a tensor whose data_offsets point past the data */
    static const char lie[] = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1000000],\"data_offsets\":[0,4000000]}}";
    size_t hl = sizeof lie - 1;
    unsigned char *s = malloc(8 + hl + 16);
    REQUIRE(s);
    for (int b = 0; b < 8; b++) s[b] = (unsigned char)((uint64_t)hl >> (8 * b));
    memcpy(s + 8, lie, hl);
    memset(s + 8 + hl, 0, 16);
    REQUIRE(fx_write(f, s, 8 + hl + 16) == 0);
    free(s);
    CHECK_ERR(sck_ckpt_open(f, &ck), SCK_ERR_FORMAT, "bomb.safetensors");
    sck_ckpt_close(ck);
}

TEST(hostile_hf_index_with_non_string_or_escaping_file_names) {
    static const char *const bad[] = {
        "{\"weight_map\": {\"a\": \"x.safetensors\", \"b\": 5}}",
        "{\"weight_map\": {\"a\": \"../x.safetensors\"}}",
        "{\"weight_map\": {\"a\": \"..\"}}",
        "{\"weight_map\": {\"a\": \"\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char dir[64], path[4300];
        snprintf(dir, sizeof dir, "hfbad%zu", i);
        const char *d = sub(dir);
        char dcopy[4200];
        snprintf(dcopy, sizeof dcopy, "%s", d);
        REQUIRE(mkdir(dcopy, 0755) == 0);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dcopy);
        FILE *f = fopen(path, "w");
        REQUIRE(f);
        fputs(bad[i], f);
        fclose(f);
        sck_ckpt *ck = NULL;
        CHECK_ERR(sck_ckpt_open(dcopy, &ck), SCK_ERR_FORMAT, "is not a plain file name");
        sck_value *v = NULL;
        CHECK_ERR(st_read_values(dcopy, &v), SCK_ERR_FORMAT, "is not a plain file name");
    }
}
