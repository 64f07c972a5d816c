/* test_dcp_meta.c - the `.metadata` codec: round trips at scale, and hostile metadata rejected. */
#include <stdlib.h>
#include <string.h>

#include "format/dcp_meta.h"
#include "harness.h"
#include "format/pickle.h"

static void build_model(ck_meta *m, size_t nkeys) {
    memset(m, 0, sizeof *m);
    uint32_t f0, f1;
    ck_meta_file(m, "__0_0.distcp", &f0);
    ck_meta_file(m, "__1_0.distcp", &f1);
    for (size_t i = 0; i < nkeys; i++) {
        char key[64];
        snprintf(key, sizeof key, "model.layer%04zu.weight", i);
        ck_entry *e;
        ck_meta_add(m, key, &e);
        if (i % 7 == 3) {
            e->is_bytes = 1;
            ck_chunk c;
            memset(&c, 0, sizeof c);
            c.file = f1;
            c.offset = 1000 + i;
            c.length = 55;
            ck_entry_add_chunk(e, &c, NULL, NULL);
            continue;
        }
        e->dtype = (int)(i % SCK_DTYPE_COUNT);
        snprintf(e->dtype_name, sizeof e->dtype_name, "%s", sck_dtype_name((sck_dtype)e->dtype));
        e->ndim = 2;
        e->shape[0] = (int64_t)(i % 5) + 2;
        e->shape[1] = 3000000000ll; /* > 2^31: exercises LONG1 */
        for (int64_t r = 0; r < e->shape[0]; r++) {
            ck_chunk c;
            memset(&c, 0, sizeof c);
            int64_t off[2] = {r, 0}, size[2] = {1, e->shape[1]};
            c.file = r % 2 ? f1 : f0;
            c.offset = (uint64_t)r * 5000000000ull;
            c.length = 777;
            ck_entry_add_chunk(e, &c, off, size);
        }
    }
    ck_meta_finish(m, "test");
}

/* Encoded early (before the items' places are known) and finished late, .metadata is byte for byte
 * what one encode of the finished model makes: offsets, lengths and CRCs of every pickle int width. */
TEST(dcp_meta_early_then_late_equals_one_encode) {
    ck_meta m;
    build_model(&m, 700);
    size_t n = ck_meta_nchunks(&m), k = 0;
    for (size_t i = 0; i < m.n; i++)
        for (size_t c = 0; c < m.e[i].nchunks; c++) m.e[i].chunks[c].has_crc = 0, m.e[i].chunks[c].offset = 0;
    dcp_meta_early e;
    REQUIRE_OK(dcp_meta_encode_early(&m, &e));
    CHECK(e.n == n);
    static const uint64_t widths[] = {7, 300, 70000, 3000000000ull, 1ull << 40};
    for (size_t i = 0; i < m.n; i++)
        for (size_t c = 0; c < m.e[i].nchunks; c++, k++) {
            ck_chunk *ch = &m.e[i].chunks[c];
            ch->offset = widths[k % 5] + k;
            ch->length = widths[(k + 2) % 5];
            ch->crc32c = (uint32_t)(k * 2654435761u);
            ch->has_crc = 1;
        }
    sck_buf one, two;
    sck_buf_init(&one);
    sck_buf_init(&two);
    REQUIRE_OK(dcp_meta_encode(&m, &one));
    /* a chunk without its CRC, or another model, is refused, and e is left as it was */
    size_t pre_len = e.pre.len;
    m.e[m.n - 1].chunks[0].has_crc = 0;
    CHECK_ERR(dcp_meta_encode_late(&e, &m, &two), SCK_ERR_INVALID_ARG, "has no CRC-32C");
    m.e[m.n - 1].chunks[0].has_crc = 1;
    ck_meta small;
    build_model(&small, 3);
    CHECK_ERR(dcp_meta_encode_late(&e, &small, &two), SCK_ERR_INVALID_ARG, "chunks, encoded early with");
    ck_meta_free(&small);
    CHECK(e.pre.len == pre_len && two.len == 0);
    /* finished in e's own memory: e is consumed */
    REQUIRE_OK(dcp_meta_encode_late(&e, &m, &two));
    CHECK(one.len == two.len && !memcmp(one.data, two.data, one.len));
    CHECK(e.pre.len == 0 && e.at == NULL && e.n == 0);
    dcp_meta_early_free(&e); /* idempotent */
    sck_buf_free(&one);
    sck_buf_free(&two);
    ck_meta_free(&m);
}

TEST(dcp_meta_round_trip_2500_entries) {
    ck_meta m, back;
    build_model(&m, 2500);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(dcp_meta_encode(&m, &b));
    REQUIRE_OK(dcp_meta_decode(b.data, b.len, "rt", &back));
    REQUIRE(back.n == m.n);
    for (size_t i = 0; i < m.n; i++) {
        ck_entry *x = &m.e[i], *y = &back.e[i];
        CHECK(!strcmp(x->key, y->key));
        CHECK(x->is_bytes == y->is_bytes);
        REQUIRE(x->nchunks == y->nchunks);
        if (!x->is_bytes) {
            CHECK(x->dtype == y->dtype && x->ndim == y->ndim && !memcmp(x->shape, y->shape, sizeof x->shape));
        }
        for (size_t c = 0; c < x->nchunks; c++) {
            sck_box bx, by;
            ck_chunk_box(x, c, &bx);
            ck_chunk_box(y, c, &by);
            CHECK(box_equal(&bx, &by));
            CHECK(x->chunks[c].offset == y->chunks[c].offset && x->chunks[c].length == y->chunks[c].length);
            CHECK(!strcmp(m.files[x->chunks[c].file], back.files[y->chunks[c].file]));
        }
    }
    sck_buf_free(&b);
    ck_meta_free(&m);
    ck_meta_free(&back);
}

TEST(dcp_meta_is_valid_python_pickle) {
    /* Python's own pickletools must walk our pickle (structure check; no torch needed). */
    ck_meta m;
    build_model(&m, 30);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(dcp_meta_encode(&m, &b));
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.pkl", th_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(b.data, 1, b.len, f);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import pickletools,sys; pickletools.dis(open('%s','rb').read(), out=open('/dev/null','w'))\"", path);
    CHECK(system(cmd) == 0);
    sck_buf_free(&b);
    ck_meta_free(&m);
}

/* A tensor of a dtype we do not know (torch's quantized qint8 here) is refused when .metadata is read,
 * naming the key and the dtype: its element size is unknown, so nothing about it could be listed right. */
TEST(dcp_meta_unknown_dtype_refused_at_open_by_key_and_name) {
    ck_meta m;
    memset(&m, 0, sizeof m);
    uint32_t f0;
    ck_meta_file(&m, "__0_0.distcp", &f0);
    ck_entry *e;
    REQUIRE_OK(ck_meta_add(&m, "model.q", &e));
    e->dtype = SCK_U16;
    snprintf(e->dtype_name, sizeof e->dtype_name, "uint16");
    e->ndim = 1;
    e->shape[0] = 4;
    ck_chunk c;
    memset(&c, 0, sizeof c);
    c.file = f0;
    c.length = 8;
    int64_t off = 0, size = 4;
    REQUIRE_OK(ck_entry_add_chunk(e, &c, &off, &size));
    ck_meta_finish(&m, "test");
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(dcp_meta_encode(&m, &b));
    ck_meta back;
    REQUIRE_OK(dcp_meta_decode(b.data, b.len, "ok/.metadata", &back));
    CHECK(back.n == 1 && back.e[0].dtype == SCK_U16);
    ck_meta_free(&back);
    /* the same pickle with the global torch.uint16 renamed (a same-length string: nothing else moves) */
    uint8_t *p = memmem(b.data, b.len, "uint16", 6);
    REQUIRE(p != NULL);
    memcpy(p, "qint16", 6);
    CHECK_ERR(dcp_meta_decode(b.data, b.len, "d/.metadata", &back), SCK_ERR_UNSUPPORTED,
              "d/.metadata: tensor 'model.q' has dtype torch.qint16, which shardckpt does not support");
    sck_buf_free(&b);
    ck_meta_free(&m);
}

TEST(dcp_meta_rejects_wrong_root_and_globals) {
    ck_meta m;
    /* not a Metadata */
    sck_buf b;
    sck_buf_init(&b);
    pk_writer w;
    pk_begin(&w, &b, 4);
    pk_int(&w, 5);
    pk_finish(&w);
    CHECK_ERR(dcp_meta_decode(b.data, b.len, "x/.metadata", &m), SCK_ERR_FORMAT, "x/.metadata: not a DCP Metadata object");
    sck_buf_free(&b);
    /* builtins.eval */
    sck_buf_init(&b);
    pk_begin(&w, &b, 2);
    pk_global(&w, "builtins", "eval");
    pk_cstr(&w, "1+1");
    pk_tuple(&w, 1);
    pk_reduce(&w);
    pk_finish(&w);
    CHECK_ERR(dcp_meta_decode(b.data, b.len, "x/.metadata", &m), SCK_ERR_UNSUPPORTED, "builtins.eval");
    sck_buf_free(&b);
}

/* Encodes a one-tensor model, then patches fields to hostile values before decoding. */
static int decode_patched(const char *relpath, int64_t off0, int64_t size0) {
    ck_meta m;
    memset(&m, 0, sizeof m);
    uint32_t f;
    ck_meta_file(&m, relpath, &f);
    ck_entry *e;
    ck_meta_add(&m, "w", &e);
    e->dtype = SCK_F32;
    e->ndim = 1;
    e->shape[0] = 4;
    ck_chunk c;
    memset(&c, 0, sizeof c);
    c.file = f;
    c.length = 10;
    ck_entry_add_chunk(e, &c, &off0, &size0);
    sck_buf b;
    sck_buf_init(&b);
    dcp_meta_encode(&m, &b);
    ck_meta back;
    int rc = dcp_meta_decode(b.data, b.len, "t/.metadata", &back);
    if (!rc) ck_meta_free(&back);
    sck_buf_free(&b);
    ck_meta_free(&m);
    return rc;
}

TEST(dcp_meta_rejects_path_escapes_and_out_of_bounds_chunks) {
    CHECK_OK(decode_patched("__0_0.distcp", 0, 4));
    CHECK_ERR(decode_patched("../etc/passwd", 0, 4), SCK_ERR_FORMAT, "is not a plain file name");
    CHECK_ERR(decode_patched("/abs", 0, 4), SCK_ERR_FORMAT, "is not a plain file name");
    CHECK_ERR(decode_patched("..", 0, 4), SCK_ERR_FORMAT, "is not a plain file name");
    CHECK_ERR(decode_patched("__0_0.distcp", 2, 4), SCK_ERR_FORMAT, "chunk 0 lies outside the tensor");
    CHECK_ERR(decode_patched("__0_0.distcp", -1, 2), SCK_ERR_FORMAT, "lies outside");
}

TEST(dcp_meta_every_truncation_is_rejected) {
    ck_meta m;
    build_model(&m, 5);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(dcp_meta_encode(&m, &b));
    for (size_t n = 0; n < b.len; n++) {
        ck_meta back;
        int rc = dcp_meta_decode(b.data, n, "t", &back);
        if (rc == SCK_OK) {
            ck_meta_free(&back);
            th_fail(__FILE__, __LINE__, "truncated metadata accepted");
            break;
        }
    }
    sck_buf_free(&b);
    ck_meta_free(&m);
}

TEST(dcp_meta_random_mutations_never_crash) {
    ck_meta m;
    build_model(&m, 4);
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(dcp_meta_encode(&m, &b));
    uint8_t *copy = malloc(b.len);
    uint64_t x = 88172645463325252ull;
    for (int it = 0; it < 20000; it++) {
        memcpy(copy, b.data, b.len);
        for (int k = 0; k < 3; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            copy[x % b.len] = (uint8_t)(x >> 32);
        }
        ck_meta back;
        if (dcp_meta_decode(copy, b.len, "t", &back) == SCK_OK) ck_meta_free(&back);
    }
    free(copy);
    sck_buf_free(&b);
    ck_meta_free(&m);
}

/* A 3 x 4 grid of chunks over a 9 x 8 tensor (rows 0-3, 3-6, 6-9; columns 2 each). */
static void grid_entry(ck_entry *e, ck_chunk *chunks, int64_t *dims, sck_box *boxes) {
    memset(e, 0, sizeof *e);
    e->ndim = 2;
    e->shape[0] = 9;
    e->shape[1] = 8;
    e->chunks = chunks;
    e->dims = dims;
    e->nchunks = 12;
    for (int i = 0; i < 12; i++) {
        memset(&chunks[i], 0, sizeof chunks[i]);
        int64_t *d = dims + 4 * i; /* offsets, then sizes */
        d[0] = 3 * (i / 4), d[2] = 3;
        d[1] = 2 * (i % 4), d[3] = 2;
        memset(&boxes[i], 0, sizeof boxes[i]);
        boxes[i].ndim = 2;
        boxes[i].off[0] = d[0], boxes[i].off[1] = d[1], boxes[i].size[0] = d[2], boxes[i].size[1] = d[3];
    }
}

TEST(dcp_meta_overlap_walk_finds_every_overlap_from_any_start) {
    ck_chunk chunks[12];
    int64_t dims[48];
    sck_box boxes[12];
    ck_entry e;
    grid_entry(&e, chunks, dims, boxes);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 3000; it++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        sck_box want = {2, {0}, {0}};
        want.off[0] = (int64_t)(x % 9), want.size[0] = 1 + (int64_t)((x >> 8) % (uint64_t)(9 - want.off[0]));
        want.off[1] = (int64_t)((x >> 16) % 8), want.size[1] = 1 + (int64_t)((x >> 24) % (uint64_t)(8 - want.off[1]));
        size_t from = (size_t)(x >> 32) % 20; /* past nchunks too: it wraps */
        int expect[12] = {0}, seen[12] = {0}, nexpect = 0;
        for (int c = 0; c < 12; c++) {
            sck_box ov;
            nexpect += expect[c] = box_intersect(&boxes[c], &want, &ov);
        }
        ck_ov_it w;
        size_t ci;
        sck_box ov;
        uint64_t got = 0;
        int n = 0;
        ck_ov_begin(&w, &e, &want, from);
        while (ck_ov_next(&w, &ci, &ov)) {
            REQUIRE(ci < 12);
            CHECK(expect[ci] && !seen[ci]);
            sck_box again;
            CHECK(box_intersect(&boxes[ci], &want, &again) && !memcmp(&again, &ov, sizeof ov));
            seen[ci] = 1;
            got += box_numel(&ov);
            n++;
        }
        CHECK(n == nexpect);
        CHECK(got == box_numel(&want));
    }
    /* A box inside one chunk: found first when the walk starts there, and the walk then stops. */
    sck_box inside = {2, {3, 4}, {2, 1}};
    ck_ov_it w;
    size_t ci;
    sck_box ov;
    ck_ov_begin(&w, &e, &inside, 6);
    REQUIRE(ck_ov_next(&w, &ci, &ov));
    CHECK(ci == 6);
    CHECK(w.k == 1);
    CHECK(!ck_ov_next(&w, &ci, &ov));
    CHECK(w.k == 1); /* no chunk after the covering one was intersected */
    /* A hole: the walk visits every chunk and the overlaps fall short. */
    e.nchunks = 11; /* chunk 11 (rows 6-9, columns 6-8) missing */
    sck_box corner = {2, {5, 5}, {4, 3}};
    ck_ov_begin(&w, &e, &corner, 0);
    uint64_t got = 0;
    while (ck_ov_next(&w, &ci, &ov)) got += box_numel(&ov);
    CHECK(got == box_numel(&corner) - 6);
    CHECK(w.k == 11);
}

TEST(dcp_meta_find_near_any_hint) {
    ck_meta m;
    build_model(&m, 50);
    for (long i = 0; i < 50; i++) {
        const char *key = m.e[i].key;
        CHECK(ck_meta_find_near(&m, key, i) == i);
        CHECK(ck_meta_find_near(&m, key, 49 - i) == i);
        CHECK(ck_meta_find_near(&m, key, -1) == i);
        CHECK(ck_meta_find_near(&m, key, 50) == i);
        CHECK(ck_meta_find_near(&m, key, 1000000) == i);
    }
    CHECK(ck_meta_find_near(&m, "model.layer9999.weight", 3) == -1);
    CHECK(ck_meta_find_near(&m, "", 0) == -1);
    ck_meta_free(&m);
}
