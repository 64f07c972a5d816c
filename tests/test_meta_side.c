/* test_meta_side.c - `.metadata.sck`, the model cache a save writes beside `.metadata`: opening uses it
 * only when it belongs to those `.metadata` bytes and is whole; it describes what the pickle
 * describes; sck_ckpt_verify catches one that describes something else. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_fixture.h"
#include "dcp_meta.h"
#include "harness.h"
#include "meta_side.h"
#include "meta_wire.h"

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
        c.box.ndim = 1;
        c.box.size[0] = 4;
        c.file = f0[k];
        c.length = 100;
        REQUIRE_OK(ck_entry_add_chunk(e, &c));
        c.box.off[0] = 4;
        c.file = f1[k];
        REQUIRE_OK(ck_entry_add_chunk(e, &c));
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
