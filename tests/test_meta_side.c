/* test_meta_side.c - `.metadata.sck`, the model cache a save writes beside `.metadata`: opening uses it
 * only when it belongs to those `.metadata` bytes and is whole; it describes what the pickle
 * describes; sck_ckpt_verify catches one that describes something else. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "load/ckpt.h"
#include "ckpt_fixture.h"
#include "format/dcp_meta.h"
#include "harness.h"
#include "format/meta_side.h"
#include "format/meta_wire.h"

static int pickle_model(const char *dir, ck_meta *m) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    size_t n;
    unsigned char *d = fx_read(p, &n);
    if (!d) return SCK_ERR_IO;
    int rc = dcp_meta_decode(d, n, p, m);
    free(d);
    return rc;
}

static int opened_from_side(const char *dir) {
    sck_ckpt *ck;
    if (sck_ckpt_open(dir, &ck) != SCK_OK) return -1;
    int s = ck->from_side;
    sck_ckpt_close(ck);
    return s;
}

TEST(meta_side_written_by_save_used_by_open_and_equal_to_the_pickle) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/side", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK(ck->from_side == 1);
    ck_meta m;
    REQUIRE_OK(pickle_model(dir, &m));
    CHECK(m.n == 5 && ck->m.n == 5);
    CHECK(meta_same(&m, &ck->m));
    ck_meta_free(&m);
    sck_verify_stats st;
    CHECK_OK(sck_ckpt_verify(ck, &st));
    CHECK(st.checksummed == 9);
    sck_ckpt_close(ck);
    CHECK(fx_load_version(dir, 0) == 0);
    CHECK(fx_load_resharded(dir, 2, 0) == 0); /* rank 0 broadcasts the cache's bytes */
}

static void drop_last_entry(ck_meta *m, void *ctx) {
    (void)ctx;
    m->n--; /* ck_meta_free frees up to n: free the dropped entry's parts ourselves */
    free(m->e[m->n].key);
    free(m->e[m->n].chunks);
}

TEST(meta_side_stale_or_damaged_is_ignored) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/stale", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    /* .metadata rewritten (as torch saving over the directory would): the cache no longer belongs. */
    REQUIRE_OK(fx_edit_metadata(dir, drop_last_entry, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK(ck->from_side == 0);
    CHECK(ck->m.n == 4);
    sck_ckpt_close(ck);

    snprintf(dir, sizeof dir, "%s/damaged", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, META_SIDE_NAME);
    size_t n;
    unsigned char *d = fx_read(p, &n);
    REQUIRE(d && n > 64);
    free(d);
    /* Header fields, then a payload byte, then a torn (short) file: each is refused and the pickle
     * decoded instead; the load is unaffected. */
    uint64_t offs[] = {0, 8, 16, 20, 40, n - 1};
    for (size_t k = 0; k < sizeof offs / sizeof *offs; k++) {
        REQUIRE(fx_flip(dir, META_SIDE_NAME, offs[k], 0x10) == 0);
        CHECK(opened_from_side(dir) == 0);
        CHECK(fx_load_version(dir, 0) == 0);
        REQUIRE(fx_flip(dir, META_SIDE_NAME, offs[k], 0x10) == 0);
        CHECK(opened_from_side(dir) == 1);
    }
    d = fx_read(p, &n);
    REQUIRE(d);
    REQUIRE(fx_write(p, d, n / 2) == 0);
    free(d);
    CHECK(opened_from_side(dir) == 0);
    CHECK(fx_load_version(dir, 0) == 0);
    REQUIRE(remove(p) == 0);
    CHECK(opened_from_side(dir) == 0);
    CHECK(fx_load_version(dir, 0) == 0);
}

static void bend_a_crc(ck_meta *m) { m->e[0].chunks[0].crc32c ^= 1; }

TEST(meta_side_forged_for_the_same_metadata_is_caught_by_verify) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/forged", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char p[4200];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    size_t n;
    unsigned char *meta = fx_read(p, &n);
    REQUIRE(meta);
    ck_meta m;
    REQUIRE_OK(pickle_model(dir, &m));
    bend_a_crc(&m);
    REQUIRE_OK(meta_side_write(dir, &m, meta, n)); /* a valid header for these .metadata bytes */
    free(meta);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK(ck->from_side == 1);
    CHECK(meta_same(&m, &ck->m)); /* the forgery is what was opened */
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_FORMAT, ".metadata.sck: describes another checkpoint than");
    sck_ckpt_close(ck);
    ck_meta_free(&m);
    /* The load trusts it and then finds the item's bytes disagree with its checksum. */
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "CRC-32C") != NULL);
}

TEST(meta_same_compares_file_names_not_indices) {
    ck_meta a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    uint32_t fa0, fa1, fb0, fb1;
    REQUIRE_OK(ck_meta_file(&a, "__0_0.distcp", &fa0));
    REQUIRE_OK(ck_meta_file(&a, "__1_0.distcp", &fa1));
    REQUIRE_OK(ck_meta_file(&b, "__1_0.distcp", &fb1));
    REQUIRE_OK(ck_meta_file(&b, "__0_0.distcp", &fb0));
    ck_meta *ms[2] = {&a, &b};
    uint32_t f0[2] = {fa0, fb0}, f1[2] = {fa1, fb1};
    for (int k = 0; k < 2; k++) {
        ck_entry *e;
        REQUIRE_OK(ck_meta_add(ms[k], "w", &e));
        e->dtype = SCK_F32;
        snprintf(e->dtype_name, sizeof e->dtype_name, "float32");
        e->ndim = 1;
        e->shape[0] = 8;
        ck_chunk c;
        memset(&c, 0, sizeof c);
        int64_t off = 0, size = 4;
        c.file = f0[k];
        c.length = 100;
        REQUIRE_OK(ck_entry_add_chunk(e, &c, &off, &size));
        off = 4;
        c.file = f1[k];
        REQUIRE_OK(ck_entry_add_chunk(e, &c, &off, &size));
    }
    CHECK(meta_same(&a, &b));
    b.e[0].chunks[1].file = fb0; /* the second chunk now names the other file */
    CHECK(!meta_same(&a, &b));
    b.e[0].chunks[1].file = fb1;
    b.e[0].chunks[1].length++;
    CHECK(!meta_same(&a, &b));
    ck_meta_free(&a);
    ck_meta_free(&b);
}

/* A copy of ck's model (through meta_wire). */
static int model_copy(const sck_ckpt *ck, ck_meta *m) {
    sck_buf b;
    sck_buf_init(&b);
    int rc = meta_wire_encode(&ck->m, &b);
    if (!rc) rc = meta_wire_decode(b.data, b.len, "copy", m);
    sck_buf_free(&b);
    return rc;
}

static void shift_a_payload(ck_meta *m) {
    long i = ck_meta_find(m, "model.w");
    if (i >= 0) m->e[i].chunks[0].payload += 4;
}

/* A cache whose payload offsets disagree with the archives (which .metadata does not record) is
 * caught by verify, which parses every archive. */
TEST(meta_side_payload_offsets_checked_by_verify) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/payload", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    long wi = sck_ckpt_find(ck, "model.w");
    REQUIRE(wi >= 0);
    CHECK(ck->m.e[wi].chunks[0].payload > 0); /* our save records them */
    ck_meta m;
    REQUIRE_OK(model_copy(ck, &m));
    sck_ckpt_close(ck);
    shift_a_payload(&m);
    char p[4200];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    size_t n;
    unsigned char *meta = fx_read(p, &n);
    REQUIRE(meta);
    REQUIRE_OK(meta_side_write(dir, &m, meta, n));
    free(meta);
    ck_meta_free(&m);
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK(ck->from_side == 1);
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_FORMAT, "'model.w' item at offset");
    CHECK(strstr(sck_last_error(), "is not where .metadata.sck says") != NULL);
    sck_ckpt_close(ck);
}

/* ---- the identity of .metadata: trusted unread while it is the file the save wrote ---- */

/* Bytes this thread read opening dir (-1: the open failed); *side: whether the cache served. */
static long long open_reads(const char *dir, int *side) {
    uint64_t before = fx_thread_io("rchar");
    sck_ckpt *ck;
    if (sck_ckpt_open(dir, &ck) != SCK_OK) return -1;
    long long n = (long long)(fx_thread_io("rchar") - before);
    *side = ck->from_side;
    sck_ckpt_close(ck);
    return n;
}

static long long file_size(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0 ? (long long)sb.st_size : -1;
}

#define NT 300

static int save_many(sck_comm *c, void *arg) {
    const char *dir = arg;
    int r = sck_comm_rank(c);
    static float data[NT][2][4];
    sck_state *st = sck_state_new();
    int rc = SCK_OK;
    for (int t = 0; t < NT && !rc; t++) {
        char key[64];
        snprintf(key, sizeof key, "layers.%03d.a_rather_long_parameter_name.weight", t);
        for (int k = 0; k < 4; k++) data[t][r][k] = (float)(t * 8 + r * 4 + k);
        int64_t shape[2] = {2, 4}, off[2] = {r, 0}, size[2] = {1, 4};
        rc = sck_state_add_box(st, key, SCK_F32, 2, shape, off, size, data[t][r]);
    }
    if (!rc) rc = sck_save(c, dir, st, NULL);
    sck_state_free(st);
    return rc;
}

/* Loads every tensor save_many saved, whole, on one rank: 0 if bit-exact. */
static int load_many(const char *dir) {
    static float back[NT][8];
    sck_state *st = sck_state_new();
    int rc = SCK_OK;
    for (int t = 0; t < NT && !rc; t++) {
        char key[64];
        snprintf(key, sizeof key, "layers.%03d.a_rather_long_parameter_name.weight", t);
        int64_t shape[2] = {2, 4};
        rc = sck_state_add_replicated(st, key, SCK_F32, 2, shape, back[t]);
    }
    if (!rc) rc = sck_load(NULL, dir, st, NULL);
    sck_state_free(st);
    for (int t = 0; t < NT && !rc; t++)
        for (int k = 0; k < 8; k++)
            if (back[t][k] != (float)(t * 8 + k)) rc = -1;
    return rc;
}

/* A header of version 1 (earlier builds) for the cache in dir: the same payload, compared by CRC. */
static int make_v1(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, META_SIDE_NAME);
    size_t n;
    unsigned char *d = fx_read(p, &n);
    if (!d || n < 64) return -1;
    d[7] = 1;
    memmove(d + 24, d + 64, n - 64);
    int rc = fx_write(p, d, n - 40);
    free(d);
    return rc;
}

TEST(meta_side_trusts_the_metadata_file_it_was_written_for_unread) {
    char dir[4096], copy[4096], cmd[9000];
    snprintf(dir, sizeof dir, "%s/id", th_tmpdir());
    REQUIRE_OK(sck_threads_run(2, save_many, dir));
    long long meta = file_size(dir, ".metadata"), side = file_size(dir, META_SIDE_NAME);
    REQUIRE(meta > 20000 && side > 0);
    REQUIRE(access("/proc/thread-self/io", R_OK) == 0);
    struct stat sb;
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/.metadata", dir);
    REQUIRE(stat(mp, &sb) == 0);
    int subsecond = sb.st_mtim.tv_nsec != 0 || sb.st_ctim.tv_nsec != 0;
    int s = -1;
    long long n = open_reads(dir, &s);
    CHECK(s == 1);
    /* the cache alone (and the few hundred bytes of /proc this thread read to count) */
    if (subsecond) CHECK(n >= side && n < side + 4096);
    else fprintf(stderr, "  (whole-second times here: .metadata is read and compared)\n");

    /* A copy: another inode and other times, the same bytes: .metadata read, the cache still used. */
    snprintf(copy, sizeof copy, "%s/copy", th_tmpdir());
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", dir, copy);
    REQUIRE(system(cmd) == 0);
    n = open_reads(copy, &s);
    CHECK(s == 1);
    CHECK(n >= side + meta);
    CHECK(load_many(dir) == 0);
    CHECK(load_many(copy) == 0);

    /* Times set back to what they were: the change time moves anyway, so .metadata is read. */
    struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, mp, ts, 0) == 0);
    n = open_reads(dir, &s);
    CHECK(s == 1);
    CHECK(n >= side + meta);

    /* A version 1 cache (no identity): compared by CRC, still used. */
    REQUIRE(make_v1(copy) == 0);
    n = open_reads(copy, &s);
    CHECK(s == 1);
    CHECK(n >= side - 40 + meta);

    /* .metadata rewritten in place with the same bytes and length (same inode): read and compared. */
    size_t mn;
    unsigned char *md = fx_read(mp, &mn);
    REQUIRE(md);
    REQUIRE(fx_write(mp, md, mn) == 0);
    free(md);
    n = open_reads(dir, &s);
    CHECK(s == 1);
    CHECK(n >= side + meta);
    /* ... and with other bytes of the same length: the cache no longer belongs. */
    REQUIRE(fx_flip(dir, ".metadata", (uint64_t)meta - 2, 0x01) == 0);
    sck_ckpt *ck = NULL;
    int rc = sck_ckpt_open(dir, &ck);
    CHECK(rc != SCK_OK || ck->from_side == 0);
    if (ck) sck_ckpt_close(ck);
}
