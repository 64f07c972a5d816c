/* test_meta_wire.c - the decoded model as broadcast bytes: exact round trips, and hostile bytes
 * (truncations, bit flips, broken invariants) rejected with SCK_ERR_FORMAT naming the offset. */
#include <stdlib.h>
#include <string.h>

#include "ckpt_fixture.h"
#include "format/dcp_meta.h"
#include "harness.h"
#include "format/meta_wire.h"

static ck_chunk chunk(uint32_t file, uint64_t offset, uint64_t length) {
    ck_chunk c;
    memset(&c, 0, sizeof c);
    c.file = file;
    c.offset = offset;
    c.length = length;
    return c;
}

/* Every field takes a value other than its default somewhere: bytes entries, unknown dtypes, rank 0
 * and rank 16 tensors, a tensor without chunks, raw/transformed/has_crc chunks, offsets past 4 GiB. */
static void build_model(ck_meta *m) {
    memset(m, 0, sizeof *m);
    uint32_t f0, f1, f2;
    ck_meta_file(m, "__0_0.distcp", &f0);
    ck_meta_file(m, "__1_0.distcp", &f1);
    ck_meta_file(m, "model.safetensors", &f2);
    ck_entry *e;
    ck_meta_add(m, "a.bytes", &e);
    e->is_bytes = 1;
    ck_chunk b = chunk(f1, 12345, 77);
    b.has_crc = 1;
    b.crc32c = 0xdeadbeefu;
    ck_entry_add_chunk(e, &b, NULL, NULL);

    ck_meta_add(m, "b.weight", &e);
    e->dtype = SCK_BF16;
    snprintf(e->dtype_name, sizeof e->dtype_name, "bfloat16");
    e->ndim = 2;
    e->shape[0] = 6;
    e->shape[1] = 3000000000ll;
    for (int r = 0; r < 3; r++) {
        int64_t off[2] = {2 * r, 0}, size[2] = {2, 3000000000ll};
        ck_chunk c = chunk(r % 2 ? f1 : f0, (uint64_t)r * 5000000000ull, 12000000000ull);
        c.has_crc = r != 1;
        c.crc32c = 0x80000001u + (uint32_t)r;
        c.transformed = r == 2;
        ck_entry_add_chunk(e, &c, off, size);
    }

    ck_meta_add(m, "c.complex", &e); /* a dtype we do not know, as meta_wire keeps it */
    e->dtype = -1;
    snprintf(e->dtype_name, sizeof e->dtype_name, "qint8");
    e->ndim = 1;
    e->shape[0] = 4;
    int64_t o1 = 0, s1 = 4;
    ck_chunk raw = chunk(f2, 8, 32);
    raw.raw = 1;
    ck_entry_add_chunk(e, &raw, &o1, &s1);

    ck_meta_add(m, "d.scalar", &e);
    e->dtype = SCK_F64;
    snprintf(e->dtype_name, sizeof e->dtype_name, "float64");
    ck_chunk s = chunk(f0, 0, 900);
    s.payload = 832; /* where our save put it (known from .metadata.sck) */
    ck_entry_add_chunk(e, &s, NULL, NULL);

    ck_meta_add(m, "e.empty", &e); /* a tensor nobody saved a chunk of */
    e->dtype = SCK_I8;
    snprintf(e->dtype_name, sizeof e->dtype_name, "int8");
    e->ndim = 1;
    e->shape[0] = 0;

    ck_meta_add(m, "f.rank16", &e);
    e->dtype = SCK_U8;
    snprintf(e->dtype_name, sizeof e->dtype_name, "uint8");
    e->ndim = SCK_MAX_DIMS;
    int64_t off[SCK_MAX_DIMS], size[SCK_MAX_DIMS];
    for (int d = 0; d < SCK_MAX_DIMS; d++) {
        e->shape[d] = 2;
        off[d] = d % 2;
        size[d] = 1;
    }
    ck_chunk c16 = chunk(f2, UINT64_MAX - 10, 10);
    ck_entry_add_chunk(e, &c16, off, size);
    ck_meta_finish(m, "test");
}

static void check_same(const ck_meta *x, const ck_meta *y) {
    REQUIRE(x->n == y->n);
    REQUIRE(x->nfiles == y->nfiles);
    for (size_t i = 0; i < x->nfiles; i++) CHECK(!strcmp(x->files[i], y->files[i]));
    for (size_t i = 0; i < x->n; i++) {
        const ck_entry *a = &x->e[i], *b = &y->e[i];
        CHECK(!strcmp(a->key, b->key));
        CHECK(a->is_bytes == b->is_bytes);
        CHECK(a->dtype == b->dtype);
        CHECK(!strcmp(a->dtype_name, b->dtype_name));
        CHECK(a->ndim == b->ndim);
        CHECK(!memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape));
        REQUIRE(a->nchunks == b->nchunks);
        for (size_t c = 0; c < a->nchunks; c++) {
            const ck_chunk *p = &a->chunks[c], *q = &b->chunks[c];
            sck_box pb, qb;
            ck_chunk_box(a, c, &pb);
            ck_chunk_box(b, c, &qb);
            CHECK(box_equal(&pb, &qb));
            CHECK(p->file == q->file);
            CHECK(p->offset == q->offset);
            CHECK(p->length == q->length);
            CHECK(p->raw == q->raw);
            CHECK(p->transformed == q->transformed);
            CHECK(p->has_crc == q->has_crc);
            CHECK(p->crc32c == q->crc32c);
            CHECK(p->payload == q->payload);
        }
    }
}

TEST(meta_wire_round_trip_every_field) {
    ck_meta m, back;
    build_model(&m);
    REQUIRE(m.n == 6);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(meta_wire_encode(&m, &b));
    REQUIRE_OK(meta_wire_decode(b.data, b.len, "rt", &back));
    check_same(&m, &back);
    CHECK(back.e[0].chunks[0].crc32c == 0xdeadbeefu); /* spot checks that the comparison compares */
    CHECK(back.e[1].chunks[2].offset == 10000000000ull && back.e[1].chunks[2].transformed);
    CHECK(back.e[4].nchunks == 0 && back.e[4].chunks == NULL);
    CHECK(ck_meta_find(&back, "d.scalar") == 3);
    CHECK(back.e[3].chunks[0].payload == 832 && back.e[1].chunks[0].payload == 0);
    /* The decoded model is finished and sorted: it encodes to the same bytes. */
    sck_buf b2;
    sck_buf_init(&b2);
    REQUIRE_OK(meta_wire_encode(&back, &b2));
    CHECK(b2.len == b.len && !memcmp(b2.data, b.data, b.len));
    sck_buf_free(&b2);
    sck_buf_free(&b);
    ck_meta_free(&back);
    ck_meta_free(&m);
    CHECK(m.e == NULL && m.n == 0);
}

TEST(meta_wire_round_trip_of_a_decoded_metadata_and_an_empty_model) {
    ck_meta m, dcp, back;
    build_model(&m);
    m.e[5].chunks[0].offset = 1ull << 40; /* DCP's offsets are Python ints of int64 range */
    for (size_t i = 0; i < m.n; i++)      /* .metadata refuses an unknown dtype at open */
        if (m.e[i].dtype < 0) m.e[i].dtype = SCK_COMPLEX32;
    sck_buf pk, w;
    sck_buf_init(&pk);
    sck_buf_init(&w);
    REQUIRE_OK(dcp_meta_encode(&m, &pk));
    REQUIRE_OK(dcp_meta_decode(pk.data, pk.len, "pk", &dcp));
    REQUIRE_OK(meta_wire_encode(&dcp, &w));
    REQUIRE_OK(meta_wire_decode(w.data, w.len, "w", &back));
    check_same(&dcp, &back);
    ck_meta_free(&back);
    ck_meta_free(&dcp);
    ck_meta_free(&m);

    ck_meta empty;
    memset(&empty, 0, sizeof empty);
    w.len = 0;
    REQUIRE_OK(meta_wire_encode(&empty, &w));
    REQUIRE_OK(meta_wire_decode(w.data, w.len, "w", &back));
    CHECK(back.n == 0 && back.nfiles == 0);
    ck_meta_free(&back);
    sck_buf_free(&w);
    sck_buf_free(&pk);
}

/* Whatever a corrupted input decodes to must satisfy the model's invariants. */
static int model_sane(const ck_meta *m) {
    for (size_t i = 0; i < m->n; i++) {
        const ck_entry *e = &m->e[i];
        if (i && strcmp(m->e[i - 1].key, e->key) >= 0) return 0;
        if (e->is_bytes && e->nchunks != 1) return 0;
        for (size_t c = 0; c < e->nchunks; c++) {
            sck_box b;
            ck_chunk_box(e, c, &b);
            if (e->chunks[c].file >= m->nfiles || !box_within(&b, e->shape)) return 0;
        }
    }
    for (size_t i = 0; i < m->nfiles; i++)
        if (!ck_plain_file_name(m->files[i])) return 0;
    return 1;
}

TEST(meta_wire_rejects_every_truncation_and_trailing_bytes) {
    ck_meta m, back;
    build_model(&m);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(meta_wire_encode(&m, &b));
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past the end */
        REQUIRE(copy);
        memcpy(copy, b.data, n);
        CHECK_ERR(meta_wire_decode(copy, n, "cut", &back), SCK_ERR_FORMAT, "cut: checkpoint model bytes, offset ");
        CHECK(back.e == NULL && back.n == 0);
        free(copy);
    }
    sck_buf_put_u8(&b, 0);
    CHECK_ERR(meta_wire_decode(b.data, b.len, "long", &back), SCK_ERR_FORMAT, "1 bytes after the model");
    sck_buf_free(&b);
    ck_meta_free(&m);
}

TEST(meta_wire_bit_flips_fail_cleanly_or_decode_a_sane_model) {
    ck_meta m, back;
    build_model(&m);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(meta_wire_encode(&m, &b));
    size_t failed = 0, decoded = 0;
    for (size_t i = 0; i < b.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b.data[i] ^= (uint8_t)(1u << bit);
            int rc = meta_wire_decode(b.data, b.len, "flip", &back);
            if (rc) {
                CHECK(rc == SCK_ERR_FORMAT);
                CHECK(strstr(sck_last_error(), "flip: checkpoint model bytes, offset ") != NULL);
                failed++;
            } else {
                CHECK(model_sane(&back));
                ck_meta_free(&back);
                decoded++;
            }
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    }
    /* Both happen: flags and lengths are checked, offsets and checksums are data. */
    CHECK(failed > b.len && decoded > 100);
    sck_buf_free(&b);
    ck_meta_free(&m);
}

/* Encodes a model that breaks one invariant (the encoder checks none of these) and expects the
 * decoder's message. */
static void refuse_wire(const sck_buf *b, const char *substr) {
    ck_meta back;
    int rc = meta_wire_decode(b->data, b->len, "bad", &back);
    CHECK(rc == SCK_ERR_FORMAT);
    if (rc == SCK_OK) ck_meta_free(&back);
    if (!strstr(sck_last_error(), substr) || !strstr(sck_last_error(), "bad: checkpoint model bytes, offset ")) {
        fprintf(stderr, "  message was: %s (expected \"%s\")\n", sck_last_error(), substr);
        CHECK(0);
    }
}

static void refuse(ck_meta *m, const char *substr) {
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(meta_wire_encode(m, &b));
    refuse_wire(&b, substr);
    sck_buf_free(&b);
    ck_meta_free(m);
}

TEST(meta_wire_rejects_broken_invariants_naming_them) {
    ck_meta m;
    build_model(&m);
    char *k = m.e[1].key; /* unsorted */
    m.e[1].key = m.e[2].key;
    m.e[2].key = k;
    refuse(&m, "key 'b.weight' does not follow 'c.complex' (keys must be sorted and distinct)");

    build_model(&m);
    free(m.e[2].key); /* duplicate */
    m.e[2].key = sck_strdup("b.weight");
    refuse(&m, "key 'b.weight' does not follow 'b.weight'");

    build_model(&m);
    m.e[1].chunks[1].file = 3;
    refuse(&m, "'b.weight' chunk 1 names file 3 of 3");

    build_model(&m);
    m.e[1].dims[2 * 2 * 2 + 2] = 3; /* chunk 2's first size */
    refuse(&m, "'b.weight' chunk 2 lies outside the tensor");

    /* A model cannot hold a chunk of another rank than its tensor: patch the bytes.  b.weight's chunk
     * 0 is rank 2, offsets (0, 0), sizes (2, 3000000000). */
    build_model(&m);
    sck_buf w;
    sck_buf_init(&w);
    REQUIRE_OK(meta_wire_encode(&m, &w));
    uint8_t pat[33] = {2};
    for (int j = 0; j < 8; j++) pat[17 + j] = (uint8_t)(2ull >> (8 * j)), pat[25 + j] = (uint8_t)(3000000000ull >> (8 * j));
    uint8_t *at = NULL;
    for (size_t i = 0; i + sizeof pat <= w.len; i++)
        if (!memcmp(w.data + i, pat, sizeof pat)) {
            CHECK(at == NULL);
            at = w.data + i;
        }
    REQUIRE(at != NULL);
    *at = 1;
    refuse_wire(&w, "'b.weight' chunk 0 has rank 1, the tensor 2");
    sck_buf_free(&w);
    ck_meta_free(&m);

    build_model(&m);
    m.e[5].chunks[0].length = 11; /* offset is UINT64_MAX - 10 */
    refuse(&m, "'f.rank16' chunk 0: offset+length overflows");

    build_model(&m);
    free(m.files[1]);
    m.files[1] = sck_strdup("../escape");
    refuse(&m, "file name '../escape' is not a plain name");

    build_model(&m);
    ck_chunk again = m.e[0].chunks[0];
    ck_entry_add_chunk(&m.e[0], &again, NULL, NULL);
    refuse(&m, "bytes entry 'a.bytes' has 2 chunks, not 1");

    build_model(&m);
    m.e[1].shape[1] = -1;
    refuse(&m, "'b.weight' has a negative dimension");

    build_model(&m);
    m.e[1].shape[0] = INT64_MAX;
    refuse(&m, "'b.weight' is impossibly large");

    build_model(&m);
    m.e[3].dtype = SCK_DTYPE_COUNT;
    refuse(&m, "'d.scalar': dtype");

    build_model(&m);
    m.e[3].chunks[0].payload = 900; /* the item is 900 bytes long */
    refuse(&m, "'d.scalar' chunk 0: payload offset 900 does not fit its item");

    build_model(&m);
    m.e[2].chunks[0].payload = 4; /* raw safetensors bytes have no archive */
    refuse(&m, "'c.complex' chunk 0: payload offset 4 does not fit its item");

    build_model(&m);
    m.e[0].chunks[0].payload = 4; /* nor do bytes entries have a tensor payload */
    refuse(&m, "'a.bytes' chunk 0: payload offset 4 does not fit its item");

}

TEST(meta_wire_rejects_bad_headers_and_nul_bytes) {
    ck_meta m, back;
    build_model(&m);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(meta_wire_encode(&m, &b));
    b.data[0] = 'X';
    CHECK_ERR(meta_wire_decode(b.data, b.len, "h", &back), SCK_ERR_FORMAT, "h: checkpoint model bytes, offset 0: bad magic");
    b.data[0] = 'S';
    uint8_t save[8];
    memcpy(save, b.data + 12, 8);
    memset(b.data + 12, 0xff, 8); /* 2^64-1 entries */
    CHECK_ERR(meta_wire_decode(b.data, b.len, "h", &back), SCK_ERR_FORMAT, "offset 8: header counts");
    memcpy(b.data + 12, save, 8);
    b.data[28]++; /* one key byte more than the keys hold */
    CHECK_ERR(meta_wire_decode(b.data, b.len, "h", &back), SCK_ERR_FORMAT, "the header declares 7 chunks and 54+44 string bytes, the body holds 7 and 53+44");
    b.data[28]--;
    /* a NUL inside the first file name: right after the header and its 4-byte length */
    b.data[52 + 4 + 2] = 0;
    CHECK_ERR(meta_wire_decode(b.data, b.len, "h", &back), SCK_ERR_FORMAT, "offset 56: a file name holds a NUL byte");
    b.data[52 + 4 + 2] = '_';
    b.data[109 + 1] = 0; /* inside the first key, "a.bytes": after the 3 file names */
    CHECK_ERR(meta_wire_decode(b.data, b.len, "h", &back), SCK_ERR_FORMAT, "offset 109: a key holds a NUL byte");
    sck_buf_free(&b);
    ck_meta_free(&m);
}

/* A collective load: rank 0 decodes `.metadata`, the others rebuild its model; a broken `.metadata`
 * fails on every rank with rank 0's message. */
typedef struct wire_job {
    const char *dir;
    int rc[4];
    char msg[4][512];
} wire_job;

static int load_all(sck_comm *comm, void *arg) {
    wire_job *j = arg;
    int r = sck_comm_rank(comm);
    sck_state *st = sck_state_new();
    int rc = st ? sck_load(comm, j->dir, st, NULL) : SCK_ERR_NOMEM;
    j->rc[r] = rc;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", rc ? sck_last_error() : "");
    size_t unexpected = st ? sck_state_unexpected(st, NULL) : 0;
    sck_state_free(st);
    return rc ? rc : unexpected == 0 ? SCK_ERR_MISSING_KEY : SCK_OK;
}

TEST(meta_wire_collective_load_and_rank0_errors_agreed) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 3, 0, 0, NULL, NULL));
    CHECK_OK(fx_load_resharded(dir, 4, 0));
    wire_job j;
    memset(&j, 0, sizeof j);
    j.dir = dir;
    CHECK_OK(sck_threads_run(4, load_all, &j));
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/.metadata", dir);
    REQUIRE(fx_write(mp, "\x80\x04garbage", 9) == 0);
    memset(&j, 0, sizeof j);
    j.dir = dir;
    CHECK(sck_threads_run(4, load_all, &j) == SCK_ERR_FORMAT);
    for (int r = 0; r < 4; r++) {
        CHECK(j.rc[r] == SCK_ERR_FORMAT);
        CHECK(strstr(j.msg[r], "rank 0: ") == j.msg[r]);
        CHECK(strstr(j.msg[r], "/ck/.metadata") != NULL);
    }
}
