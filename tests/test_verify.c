/* test_verify.c - CRC-32C checksums: recorded for every item, checked on load (whole-chunk and
 * resharded reads, byte items), skipped on request or when absent (torch-written), and
 * sck_ckpt_verify over whole checkpoints: flipped bits, truncation, missing files, holes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "load/ckpt.h"
#include "base/crc32c.h"
#include "format/dcp_meta.h"
#include "format/zip.h"
#include "harness.h"

TEST(crc32c_known_answers_and_chaining) {
    CHECK(sck_crc32c(0, "123456789", 9) == 0xE3069283u);
    uint8_t z[32], ff[32];
    memset(z, 0, sizeof z);
    memset(ff, 0xFF, sizeof ff);
    CHECK(sck_crc32c(0, z, 32) == 0x8A9136AAu);   /* RFC 3720 B.4 test vectors */
    CHECK(sck_crc32c(0, ff, 32) == 0x62A8AB43u);
    CHECK(sck_crc32c(0, NULL, 0) == 0);
    size_t n = (3u << 20) + 5;
    uint8_t *big = malloc(n);
    REQUIRE(big);
    th_fill(big, n, 9);
    uint32_t whole = sck_crc32c(0, big, n);
    int bad = 0;
    for (size_t cut = 0; cut < n; cut += 99991) bad += sck_crc32c(sck_crc32c(0, big, cut), big + cut, n - cut) != whole;
    CHECK(bad == 0);
    free(big);
}

/* File, offset and length of chunk c of `key`. */
static int chunk_at(const char *dir, const char *key, size_t c, char *file, uint64_t *off, uint64_t *len) {
    sck_ckpt *ck;
    int rc = sck_ckpt_open(dir, &ck);
    if (rc) return rc;
    sck_chunk_info ci;
    long i = sck_ckpt_find(ck, key);
    rc = i < 0 ? SCK_ERR_MISSING_KEY : sck_ckpt_chunk(ck, (size_t)i, c, &ci);
    if (!rc) {
        snprintf(file, 64, "%s", ci.file);
        *off = ci.offset;
        *len = ci.length;
    }
    sck_ckpt_close(ck);
    return rc;
}

TEST(checksum_flipped_bit_in_a_tensor_item_fails_the_load_naming_file_key_offset) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char file[64], want[256];
    uint64_t off, len;
    REQUIRE_OK(chunk_at(dir, "model.w", 1, file, &off, &len));
    CHECK(!strcmp(file, "__1_0.distcp"));
    snprintf(want, sizeof want, "__1_0.distcp: 'model.w' item at offset %llu (chunk 1 at [4, 0])", (unsigned long long)off);
    /* Every position of the item: zip headers, data.pkl, payload, trailer. */
    int missed = 0, positions = 0;
    for (uint64_t p = off; p < off + len; p += 37, positions++) {
        REQUIRE(fx_flip(dir, file, p, 0x10) == 0);
        int whole = fx_load_version(dir, 0);
        const char *m1 = sck_last_error();
        int ok1 = whole == -1 && strstr(m1, want) && strstr(m1, "CRC-32C");
        int rs = fx_load_resharded(dir, 2, 0);
        int ok2 = rs == SCK_ERR_CHECKSUM && strstr(sck_last_error(), want);
        if (!ok1 || !ok2) {
            if (missed++ < 3) fprintf(stderr, "  flip at %llu: whole %d, resharded %d: %s\n", (unsigned long long)p, whole, rs, sck_last_error());
        }
        REQUIRE(fx_flip(dir, file, p, 0x10) == 0);
    }
    CHECK(positions > 10);
    CHECK(missed == 0);
    CHECK(fx_load_version(dir, 0) == 0);
}

TEST(checksum_skipped_with_no_verify_and_flip_goes_unnoticed_in_payload) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    char file[64];
    uint64_t off, len;
    REQUIRE_OK(chunk_at(dir, "model.w", 2, file, &off, &len));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    ck_res *r;
    long i = sck_ckpt_find(ck, "model.w");
    REQUIRE(i >= 0);
    REQUIRE_OK(ckpt_resolve_chunk(ck, (size_t)i, 2, &r));
    uint64_t payload = r->data_off;
    sck_ckpt_close(ck);
    CHECK(payload > off && payload + 160 < off + len);
    REQUIRE(fx_flip(dir, file, payload + 17, 0x01) == 0); /* an element's byte */
    CHECK(fx_load_version(dir, SCK_LOAD_NO_VERIFY) == -2);  /* loads, but the bytes are wrong */
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "__2_0.distcp: 'model.w' item at offset") != NULL);
}

TEST(checksum_flipped_bit_in_a_byte_item) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 2, 1, 0, NULL, NULL));
    char file[64];
    uint64_t off, len;
    REQUIRE_OK(chunk_at(dir, "other.rng", 0, file, &off, &len));
    REQUIRE(fx_flip(dir, file, off + len / 2, 0x80) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "'other.rng' item at offset") != NULL);
    CHECK(strstr(sck_last_error(), "CRC-32C") != NULL);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_verify_stats st;
    CHECK_ERR(sck_ckpt_verify(ck, &st), SCK_ERR_CHECKSUM, "'other.rng' item at offset");
    sck_ckpt_close(ck);
}

TEST(verify_counts_every_chunk_and_checksum) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_verify_stats st;
    REQUIRE_OK(sck_ckpt_verify(ck, &st));
    /* model.w: 3 row blocks; model.b: 3 flat ranges (1-d: one box each); opt.m: 1; two byte items */
    CHECK(st.entries == 5);
    CHECK(st.chunks == 9);
    CHECK(st.checksummed == 9);
    uint64_t total = 0;
    for (int r = 0; r < 3; r++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/__%d_0.distcp", dir, r);
        size_t n;
        unsigned char *d = fx_read(p, &n);
        REQUIRE(d);
        total += n;
        free(d);
    }
    CHECK(st.bytes == total); /* items fill the data files exactly */
    sck_ckpt_close(ck);
}

TEST(verify_reports_truncation_and_missing_files) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    snprintf(p, sizeof p, "%s/__2_0.distcp", dir);
    REQUIRE(truncate(p, 100) == 0);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_FORMAT, "__2_0.distcp: 'model.b' item");
    CHECK(strstr(sck_last_error(), "extends past the end of the file (100 bytes)") != NULL);
    sck_ckpt_close(ck);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "extends past the end of the file") != NULL);
    REQUIRE(unlink(p) == 0);
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_IO, "__2_0.distcp: cannot open data file");
    sck_ckpt_close(ck);
    CHECK(fx_load_resharded(dir, 2, 0) == SCK_ERR_IO);
    CHECK(strstr(sck_last_error(), "__2_0.distcp: cannot open data file") != NULL);
}

static void strip_crcs(struct ck_meta *m, void *ctx) {
    (void)ctx;
    for (size_t i = 0; i < m->n; i++)
        for (size_t c = 0; c < m->e[i].nchunks; c++) m->e[i].chunks[c].has_crc = 0;
}

/* A checkpoint of `ranks` ranks as torch writes one: no CRC-32Cs and no model cache (.metadata.sck). */
static int save_as_torch_writes(const char *dir, int ranks) {
    int rc = fx_save(dir, ranks, 0, 0, NULL, NULL);
    if (!rc) rc = fx_edit_metadata(dir, strip_crcs, NULL);
    char side[4200];
    snprintf(side, sizeof side, "%s/.metadata.sck", dir);
    if (!rc && unlink(side) != 0) rc = SCK_ERR_IO;
    return rc;
}

TEST(checksum_absent_as_in_torch_checkpoints_checks_zip_crc32s) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 1, 0, NULL, NULL));
    REQUIRE_OK(fx_edit_metadata(dir, strip_crcs, NULL));
    size_t n;
    char p[4200];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    unsigned char *meta = fx_read(p, &n);
    REQUIRE(meta);
    CHECK(memmem(meta, n, DCP_CRC_KEY, strlen(DCP_CRC_KEY)) == NULL);
    free(meta);
    CHECK(fx_load_version(dir, 0) == 1);
    CHECK_OK(fx_load_resharded(dir, 3, 0));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    sck_verify_stats st;
    REQUIRE_OK(sck_ckpt_verify(ck, &st));
    CHECK(st.chunks == 9 && st.checksummed == 9); /* each item's zip records, by their CRC-32 */
    sck_ckpt_close(ck);
}

/* Without a CRC-32C, a byte item whose zip signature is gone (a zeroed block) is refused, never taken
 * for raw bytes: torch writes every byte item with torch.save. */
TEST(checksum_absent_byte_item_without_zip_signature_is_refused) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(save_as_torch_writes(dir, 2));
    char file[64];
    uint64_t off, len;
    REQUIRE_OK(chunk_at(dir, "other.rng", 0, file, &off, &len));
    for (int b = 0; b < 4; b++) REQUIRE(fx_flip(dir, file, off + (uint64_t)b, b == 0 ? 'P' : b == 1 ? 'K' : b == 2 ? 3 : 4) == 0);
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck));
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_CHECKSUM, "'other.rng' item at offset");
    CHECK(strstr(sck_last_error(), "not a torch.save archive (no zip signature) and no CRC-32C vouches for it") != NULL);
    long i = sck_ckpt_find(ck, "other.rng");
    REQUIRE(i >= 0);
    void *data = NULL;
    size_t n = 0;
    sck_value *v = NULL;
    CHECK_ERR(sck_ckpt_read_bytes(ck, (size_t)i, &data, &n, &v), SCK_ERR_CHECKSUM, "'other.rng' item at offset");
    CHECK(data == NULL && v == NULL);
    sck_ckpt_close(ck);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "not a torch.save archive") != NULL);
    for (int b = 0; b < 4; b++) REQUIRE(fx_flip(dir, file, off + (uint64_t)b, b == 0 ? 'P' : b == 1 ? 'K' : b == 2 ? 3 : 4) == 0);
    CHECK(fx_load_version(dir, 0) == 0); /* the signature back: it loads */
}

static void drop_middle_chunk(struct ck_meta *m, void *ctx) {
    (void)ctx;
    long i = ck_meta_find(m, "model.w");
    if (i < 0 || m->e[i].nchunks != 3) return;
    ck_entry *e = &m->e[i];
    size_t nd = 2 * (size_t)e->ndim;
    e->chunks[1] = e->chunks[2];
    memcpy(e->dims + nd, e->dims + 2 * nd, nd * sizeof *e->dims);
    e->nchunks = 2;
}

TEST(verify_reports_holes_and_load_reads_only_covered_boxes) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    REQUIRE_OK(fx_edit_metadata(dir, drop_middle_chunk, NULL));
    sck_ckpt *ck;
    REQUIRE_OK(sck_ckpt_open(dir, &ck)); /* holes are not an error at open */
    CHECK_ERR(sck_ckpt_verify(ck, NULL), SCK_ERR_COVERAGE, "tensor 'model.w': saved chunks leave holes");
    long i = sck_ckpt_find(ck, "model.w");
    REQUIRE(i >= 0);
    float rows[4][10];
    int64_t off[2] = {0, 0}, size[2] = {4, 10};
    CHECK_OK(sck_ckpt_read_box(ck, (size_t)i, off, size, rows)); /* rows 0-3: chunk 0 */
    off[0] = 3;
    CHECK_ERR(sck_ckpt_read_box(ck, (size_t)i, off, size, rows), SCK_ERR_COVERAGE, "the checkpoint has holes");
    sck_ckpt_close(ck);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "'model.w': saved chunks cover") != NULL);
}

/* Without CRC-32Cs (torch-written), every byte of every zip record is still covered by its zip
 * CRC-32: bit flips in data.pkl and in payloads are refused by the load, a resharded load, a box read
 * and verify, never loaded as SCK_OK. */
TEST(checksum_absent_zip_crc32_refuses_every_record_flip) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(save_as_torch_writes(dir, 3));
    char file[64];
    uint64_t off, len;
    REQUIRE_OK(chunk_at(dir, "model.w", 1, file, &off, &len));
    int fd;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    REQUIRE((fd = open(p, O_RDONLY)) >= 0);
    zip_dir zd;
    int rc = zip_read_dir(zip_pread_fd, &fd, off, len, "item", &zd);
    close(fd);
    REQUIRE_OK(rc);
    int n = 0, refused = 0, ok_after = 1;
    for (size_t k = 0; k < zd.n; k++) {
        const zip_rec *z = &zd.rec[k];
        if (strcmp(z->name, "data.pkl") && strncmp(z->name, "data/", 5)) continue;
        for (uint64_t b = 0; b < z->size; b += 7) {
            REQUIRE(fx_flip(dir, file, z->data_off + b, 0x10) == 0);
            n += 4;
            refused += fx_load_version(dir, 0) == -1;
            refused += fx_load_resharded(dir, 2, 0) != SCK_OK;
            sck_ckpt *ck;
            REQUIRE_OK(sck_ckpt_open(dir, &ck));
            long i = sck_ckpt_find(ck, "model.w");
            float rows[2][10];
            int64_t o[2] = {4, 0}, s[2] = {2, 10};
            refused += sck_ckpt_read_box(ck, (size_t)i, o, s, rows) != SCK_OK;
            refused += sck_ckpt_verify(ck, NULL) == SCK_ERR_CHECKSUM && strstr(sck_last_error(), "does not match its zip CRC-32");
            sck_ckpt_close(ck);
            REQUIRE(fx_flip(dir, file, z->data_off + b, 0x10) == 0);
        }
    }
    zip_dir_free(&zd);
    ok_after = fx_load_version(dir, 0) == 0;
    printf("  %d mutations: %d refused\n", n, refused);
    CHECK(n > 0 && refused == n);
    CHECK(ok_after);
}
