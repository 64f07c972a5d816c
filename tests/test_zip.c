/* test_zip.c - the stored zip writer and reader: exact layout, alignment, round trips, a real
 * torch.save archive, Python zipfile/torch.load acceptance and ZIP64 (hostile archives: test_zip_hostile.c). */
#include "zip_helpers.h"

/* ---- CRC ---- */

TEST(zip_crc32_known_values) {
    CHECK(sck_crc32(0, "123456789", 9) == 0xCBF43926u);
    CHECK(sck_crc32(0, NULL, 0) == 0);
    CHECK(sck_crc32(sck_crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u);
    /* The torch archive's central directory CRC of data/0. */
    CHECK(sck_crc32(0, torch_zip + TORCH_DATA_OFF, 24) == 0x91e79017u);
}

/* ---- writer layout ---- */

TEST(zip_writer_exact_structure) {
    static const uint8_t d0[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    zip_entry e[2] = {mk_entry("data.pkl", "hello", 5), mk_entry("data/0", d0, 8)};
    zip_plan p;
    REQUIRE_OK(zip_plan_build(&p, e, 2, "archive", 0, 64));
    CHECK(p.total == 280);
    CHECK(p.payload_off[0] == 64 && p.payload_off[1] == 128);
    REQUIRE(p.nseg == 5);
    CHECK(p.seg[0].entry == -1 && p.seg[0].buf_off == 0 && p.seg[0].len == 64);
    CHECK(p.seg[1].entry == 0 && p.seg[1].len == 5);
    CHECK(p.seg[2].entry == -1 && p.seg[2].buf_off == 64 && p.seg[2].len == 59);
    CHECK(p.seg[3].entry == 1 && p.seg[3].len == 8);
    CHECK(p.seg[4].entry == -1 && p.seg[4].buf_off == 123 && p.seg[4].len == 144);
    CHECK(p.hdr.len == 267);
    zip_plan_free(&p);

    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(zip_build_mem(&b, e, 2, "archive", 64));
    REQUIRE(b.len == 280);
    const uint8_t *z = b.data;
    /* local header 0 */
    CHECK(sck_le32(z) == 0x04034b50u);
    CHECK(sck_le16(z + 4) == 20 && sck_le16(z + 6) == 0 && sck_le16(z + 8) == 0);
    CHECK(sck_le16(z + 10) == 0 && sck_le16(z + 12) == 0x21);
    CHECK(sck_le32(z + 14) == sck_crc32(0, "hello", 5));
    CHECK(sck_le32(z + 18) == 5 && sck_le32(z + 22) == 5);
    CHECK(sck_le16(z + 26) == 16 && sck_le16(z + 28) == 18);
    CHECK(!memcmp(z + 30, "archive/data.pkl", 16));
    CHECK(sck_le16(z + 46) == 0x4246 && sck_le16(z + 48) == 14);
    CHECK(!memcmp(z + 64, "hello", 5));
    /* local header 1 at 69 */
    CHECK(sck_le32(z + 69) == 0x04034b50u);
    CHECK(sck_le32(z + 69 + 18) == 8 && sck_le32(z + 69 + 22) == 8);
    CHECK(sck_le16(z + 69 + 26) == 14 && sck_le16(z + 69 + 28) == 15);
    CHECK(!memcmp(z + 99, "archive/data/0", 14));
    CHECK(sck_le16(z + 113) == 0x4246 && sck_le16(z + 115) == 11);
    CHECK(!memcmp(z + 128, d0, 8));
    /* central directory at 136 */
    const uint8_t *c = z + 136;
    CHECK(sck_le32(c) == 0x02014b50u);
    CHECK(sck_le16(c + 4) == 20 && sck_le16(c + 6) == 20 && sck_le16(c + 8) == 0 && sck_le16(c + 10) == 0);
    CHECK(sck_le16(c + 14) == 0x21);
    CHECK(sck_le32(c + 16) == sck_crc32(0, "hello", 5));
    CHECK(sck_le32(c + 20) == 5 && sck_le32(c + 24) == 5);
    CHECK(sck_le16(c + 28) == 16 && sck_le16(c + 30) == 0 && sck_le16(c + 32) == 0 && sck_le16(c + 34) == 0);
    CHECK(sck_le32(c + 42) == 0);
    CHECK(!memcmp(c + 46, "archive/data.pkl", 16));
    c = z + 136 + 62;
    CHECK(sck_le32(c) == 0x02014b50u);
    CHECK(sck_le32(c + 16) == sck_crc32(0, d0, 8));
    CHECK(sck_le32(c + 20) == 8 && sck_le32(c + 24) == 8);
    CHECK(sck_le32(c + 42) == 69);
    CHECK(!memcmp(c + 46, "archive/data/0", 14));
    /* end of central directory at 258, no ZIP64 records */
    const uint8_t *q = z + 258;
    CHECK(sck_le32(q) == 0x06054b50u);
    CHECK(sck_le16(q + 4) == 0 && sck_le16(q + 6) == 0 && sck_le16(q + 8) == 2 && sck_le16(q + 10) == 2);
    CHECK(sck_le32(q + 12) == 122 && sck_le32(q + 16) == 136 && sck_le16(q + 20) == 0);
    for (size_t i = 0; i + 4 <= b.len; i++) CHECK(sck_le32(z + i) != 0x06064b50u && sck_le32(z + i) != 0x07064b50u);
    sck_buf_free(&b);
}

TEST(zip_writer_appends_to_buffer) {
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(sck_buf_append(&b, "JUNK", 4));
    zip_entry e = mk_entry("v", "3\n", 2);
    REQUIRE_OK(zip_build_mem(&b, &e, 1, "p", 1));
    CHECK(!memcmp(b.data, "JUNK", 4));
    zip_dir d;
    REQUIRE_OK(read_mem(b.data, b.len, 4, b.len - 4, &d));
    CHECK(d.n == 1 && d.rec[0].data_off == 4 + 30 + 3 && !strcmp(d.prefix, "p"));
    zip_dir_free(&d);
    sck_buf_free(&b);
}

TEST(zip_writer_alignment) {
    static const uint64_t offs[] = {0, 1, 2, 3, 5, 17, 61, 62, 63, 64, 100, 4093, 4095, 4096, 1234567};
    static const uint32_t aligns[] = {1, 2, 4, 8, 64, 4096};
    static const char *names[] = {"a", "data.pkl", "byteorder", "data/0", "data/17", "version"};
    static const size_t sizes[] = {3, 154, 6, 0, 100, 2};
    uint8_t payload[200];
    th_fill(payload, sizeof payload, 7);
    zip_entry e[6];
    for (int i = 0; i < 6; i++) e[i] = mk_entry(names[i], payload, sizes[i]);
    for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++) {
        for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
            uint64_t fo = offs[oi];
            uint32_t al = aligns[ai];
            zip_plan p;
            REQUIRE_OK(zip_plan_build(&p, e, 6, "archive", fo, al));
            uint8_t *buf = calloc(1, (size_t)(fo + p.total));
            REQUIRE(buf);
            assemble(buf + fo, &p, e);
            uint64_t lho = 0;
            for (int i = 0; i < 6; i++) {
                CHECK((fo + p.payload_off[i]) % al == 0);
                const uint8_t *h = buf + fo + lho;
                CHECK(sck_le32(h) == 0x04034b50u);
                uint16_t nlen = sck_le16(h + 26), xlen = sck_le16(h + 28);
                CHECK(lho + 30 + nlen + xlen == p.payload_off[i]);
                /* padding is a well-formed FB field, and no bigger than needed */
                CHECK(xlen == 0 || (xlen >= 4 && sck_le16(h + 30 + nlen) == 0x4246 &&
                                    sck_le16(h + 32 + nlen) == xlen - 4u));
                CHECK(xlen < al + 4);
                lho = p.payload_off[i] + sizes[i];
            }
            zip_dir d;
            int rc = read_mem(buf, fo + p.total, fo, p.total, &d);
            CHECK_OK(rc);
            if (rc == 0) {
                CHECK(d.n == 6);
                for (size_t i = 0; i < d.n && i < 6; i++) {
                    CHECK(!strcmp(d.rec[i].name, names[i]));
                    CHECK(d.rec[i].data_off == fo + p.payload_off[i]);
                    CHECK(d.rec[i].data_off % al == 0);
                    CHECK(d.rec[i].size == sizes[i]);
                    CHECK(!memcmp(buf + d.rec[i].data_off, payload, sizes[i]));
                }
                zip_dir_free(&d);
            }
            free(buf);
            zip_plan_free(&p);
        }
    }
}

TEST(zip_writer_rejects_bad_arguments) {
    zip_entry e[2] = {mk_entry("a", "x", 1), mk_entry("a", "y", 1)};
    zip_plan p;
    CHECK_ERR(zip_plan_build(&p, e, 1, "p", 0, 0), SCK_ERR_INVALID_ARG, "power of two");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 1, "p", 0, 48), SCK_ERR_INVALID_ARG, "power of two");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 1, NULL, 0, 64), SCK_ERR_INVALID_ARG, "prefix");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 1, "", 0, 64), SCK_ERR_INVALID_ARG, "prefix");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 1, "a/b", 0, 64), SCK_ERR_INVALID_ARG, "prefix");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 2, "p", 0, 64), SCK_ERR_INVALID_ARG, "duplicate entry name 'a'");
    zip_plan_free(&p);
    CHECK_ERR(zip_plan_build(&p, e, 1, "p", 0, 1u << 20), SCK_ERR_INVALID_ARG, "padding");
    zip_plan_free(&p);
    zip_entry unnamed = {NULL, "x", 1, 0};
    CHECK_ERR(zip_plan_build(&p, &unnamed, 1, "p", 0, 64), SCK_ERR_INVALID_ARG, "no name");
    zip_plan_free(&p);
    char *long_name = malloc(70000);
    REQUIRE(long_name);
    memset(long_name, 'n', 69999);
    long_name[69999] = 0;
    zip_entry longe = {long_name, "x", 1, 0};
    CHECK_ERR(zip_plan_build(&p, &longe, 1, "p", 0, 64), SCK_ERR_INVALID_ARG, "too long");
    zip_plan_free(&p);
    free(long_name);
    zip_entry huge[2] = {{"a", NULL, UINT64_MAX - 10, 0}, {"b", NULL, 5, 0}};
    CHECK_ERR(zip_plan_build(&p, huge, 2, "p", 0, 64), SCK_ERR_INVALID_ARG, "overflows");
    zip_plan_free(&p);
    sck_buf b;
    sck_buf_init(&b);
    zip_entry nodata = {"a", NULL, 4, 0};
    CHECK_ERR(zip_build_mem(&b, &nodata, 1, "p", 64), SCK_ERR_INVALID_ARG, "no data");
    CHECK(b.len == 0);
    sck_buf_free(&b);
}

/* ---- round trips ---- */

TEST(zip_round_trip_many_entries) {
    enum { N = 500 };
    static char names[N][24];
    zip_entry e[N];
    uint8_t *pool = malloc(N * 3000);
    REQUIRE(pool);
    th_fill(pool, N * 3000, 42);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "data/%d", i);
        size_t sz = (size_t)((i * 7919u) % 3000u);
        if (i % 50 == 0) sz = 0;
        e[i] = mk_entry(names[i], pool + i * 3000, sz);
    }
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(zip_build_mem(&b, e, N, "ckpt", 64));
    zip_dir d;
    REQUIRE_OK(read_mem(b.data, b.len, 0, b.len, &d));
    CHECK(d.n == N && !strcmp(d.prefix, "ckpt"));
    for (size_t i = 0; i < d.n; i++) {
        CHECK(!strcmp(d.rec[i].name, names[i]));
        CHECK(d.rec[i].size == e[i].size && d.rec[i].crc == e[i].crc);
        CHECK(d.rec[i].data_off % 64 == 0);
        CHECK(!memcmp(b.data + d.rec[i].data_off, e[i].data, e[i].size));
        CHECK(sck_crc32(0, b.data + d.rec[i].data_off, e[i].size) == d.rec[i].crc);
    }
    const zip_rec *r = zip_find(&d, "data/499");
    CHECK(r && r == &d.rec[499]);
    CHECK(zip_find(&d, "data/500") == NULL);
    CHECK(zip_find(&d, "ckpt/data/1") == NULL);
    zip_dir_free(&d);
    CHECK(d.n == 0 && d.rec == NULL && d.prefix == NULL);

    if (have_python()) { /* Python's zipfile checks every CRC and header */
        char path[4200], cmd[8800];
        snprintf(path, sizeof path, "%s/many.zip", th_tmpdir());
        REQUIRE(write_file(path, b.data, b.len));
        snprintf(cmd, sizeof cmd,
                 PY " -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; "
                 "n=z.namelist(); assert len(n)==500 and n[0]=='ckpt/data/0' and n[499]=='ckpt/data/499'; "
                 "assert len(z.read('ckpt/data/1'))==7919%%3000\" '%s'", path);
        CHECK(run_ok(cmd));
    }
    sck_buf_free(&b);
    free(pool);
}

TEST(zip_python_zipfile_accepts_writer_output) {
    if (!have_python()) {
        printf("  notice: %s missing, Python zipfile check skipped\n", PY);
        return;
    }
    uint8_t big[5000];
    th_fill(big, sizeof big, 3);
    zip_entry e[4] = {mk_entry("a.txt", "hello", 5), mk_entry("b/c", big, sizeof big), mk_entry("empty", NULL, 0),
                      mk_entry("v", "3\n", 2)};
    static const uint64_t offs[] = {0, 3, 4095};
    for (int k = 0; k < 3; k++) {
        zip_plan p;
        REQUIRE_OK(zip_plan_build(&p, e, 4, "arch", offs[k], 4096));
        uint8_t *buf = malloc((size_t)p.total);
        REQUIRE(buf);
        assemble(buf, &p, e);
        char path[4200], cmd[8800];
        snprintf(path, sizeof path, "%s/w%d.zip", th_tmpdir(), k);
        CHECK(write_file(path, buf, (size_t)p.total));
        snprintf(cmd, sizeof cmd,
                 PY " -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; "
                 "assert z.namelist()==['arch/a.txt','arch/b/c','arch/empty','arch/v'], z.namelist(); "
                 "assert z.read('arch/a.txt')==b'hello' and z.read('arch/empty')==b'' and z.read('arch/v')==b'3\\\\n'; "
                 "assert all(i.compress_type==0 for i in z.infolist())\" '%s'", path);
        CHECK(run_ok(cmd));
        free(buf);
        zip_plan_free(&p);
    }
}

/* ---- a real torch.save archive ---- */

static void check_torch_dir(const zip_dir *d, const uint8_t *buf, uint64_t base) {
    REQUIRE(d->n == 3);
    CHECK(!strcmp(d->prefix, "archive"));
    CHECK(!strcmp(d->rec[0].name, "data.pkl") && d->rec[0].data_off == base + TORCH_PKL_OFF);
    CHECK(d->rec[0].size == TORCH_PKL_LEN && d->rec[0].crc == 0x275373c7u);
    CHECK(!strcmp(d->rec[1].name, "data/0") && d->rec[1].data_off == base + TORCH_DATA_OFF);
    CHECK(d->rec[1].size == 24 && d->rec[1].crc == 0x91e79017u);
    CHECK(!strcmp(d->rec[2].name, "version") && d->rec[2].data_off == base + TORCH_VERSION_OFF);
    CHECK(d->rec[2].size == 2 && !memcmp(buf + d->rec[2].data_off, "3\n", 2));
    const zip_rec *r = zip_find(d, "data/0");
    REQUIRE(r);
    float f[6];
    memcpy(f, buf + r->data_off, sizeof f);
    for (int i = 0; i < 6; i++) CHECK(f[i] == (float)i);
    for (size_t i = 0; i < d->n; i++) CHECK(sck_crc32(0, buf + d->rec[i].data_off, d->rec[i].size) == d->rec[i].crc);
    CHECK(!memcmp(buf + d->rec[0].data_off, "\x80\x02" "ctorch._utils\n_rebuild_tensor_v2", 32));
}

TEST(zip_reads_torch_archive) {
    zip_dir d;
    REQUIRE_OK(read_mem(torch_zip, sizeof torch_zip, 0, sizeof torch_zip, &d));
    check_torch_dir(&d, torch_zip, 0);
    zip_dir_free(&d);
}

TEST(zip_reads_torch_archive_at_base_1000) {
    size_t total = 1000 + sizeof torch_zip + 500;
    uint8_t *buf = malloc(total);
    REQUIRE(buf);
    th_fill(buf, total, 9);
    memcpy(buf + 1000, torch_zip, sizeof torch_zip);
    zip_dir d;
    REQUIRE_OK(read_mem(buf, total, 1000, sizeof torch_zip, &d));
    check_torch_dir(&d, buf, 1000);
    zip_dir_free(&d);
    /* The same through a file descriptor. */
    char path[4200];
    snprintf(path, sizeof path, "%s/items.bin", th_tmpdir());
    REQUIRE(write_file(path, buf, total));
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    REQUIRE_OK(zip_read_dir(zip_pread_fd, &fd, 1000, sizeof torch_zip, "items.bin", &d));
    check_torch_dir(&d, buf, 1000);
    zip_dir_free(&d);
    /* A window running past the end of the file is an I/O-level truncation naming the file. */
    CHECK_ERR(zip_read_dir(zip_pread_fd, &fd, 1000, total, "items.bin", &d), SCK_ERR_FORMAT, "items.bin: reading");
    CHECK(d.n == 0 && d.rec == NULL);
    close(fd);
    free(buf);
}

TEST(zip_torch_load_accepts_writer_output) {
    if (!have_python() || !run_ok(PY " -c 'import torch' >/dev/null 2>&1")) {
        printf("  notice: %s cannot import torch, torch.load check skipped\n", PY);
        return;
    }
    zip_entry e[4] = {mk_entry("data.pkl", torch_zip + TORCH_PKL_OFF, TORCH_PKL_LEN), mk_entry("byteorder", "little", 6),
                      mk_entry("data/0", torch_zip + TORCH_DATA_OFF, 24), mk_entry("version", "3\n", 2)};
    static const char *prefixes[] = {"archive", "mytensor"};
    for (int k = 0; k < 2; k++) {
        sck_buf b;
        sck_buf_init(&b);
        REQUIRE_OK(zip_build_mem(&b, e, 4, prefixes[k], 64));
        char path[4200], cmd[8800];
        snprintf(path, sizeof path, "%s/t%d.pt", th_tmpdir(), k);
        CHECK(write_file(path, b.data, b.len));
        sck_buf_free(&b);
        snprintf(cmd, sizeof cmd,
                 PY " -c \"import torch,sys; t=torch.load(sys.argv[1]); "
                 "assert t.tolist()==[[0,1,2],[3,4,5]], t; assert t.dtype==torch.float32\" '%s'", path);
        CHECK(run_ok(cmd));
    }
}

/* ---- ZIP64 ---- */

#define GIB6 (6ull << 30)

TEST(zip64_plan_for_a_6gib_entry) {
    zip_entry e[3] = {mk_entry("data.pkl", "abc", 3), {"data/0", NULL, GIB6, 0x12345678u}, mk_entry("version", "3\n", 2)};
    zip_plan p;
    REQUIRE_OK(zip_plan_build(&p, e, 3, "archive", 0, 64));
    REQUIRE(p.nseg == 7);
    CHECK(p.payload_off[0] == 64);
    /* local header of data/0 at 67: 30 + 14 name + 20 zip64 extra = 131 -> padded to 192 */
    CHECK(p.payload_off[1] == 192);
    CHECK(p.seg[3].entry == 1 && p.seg[3].len == GIB6);
    uint64_t lho_v = 192 + GIB6;
    CHECK(p.payload_off[2] == lho_v + 64); /* 30 + 15 + pad to 64 */
    const uint8_t *h = p.hdr.data + p.seg[2].buf_off;
    CHECK(p.seg[2].len == 192 - 67);
    CHECK(sck_le32(h) == 0x04034b50u && sck_le16(h + 4) == 45);
    CHECK(sck_le32(h + 14) == 0x12345678u);
    CHECK(sck_le32(h + 18) == 0xFFFFFFFFu && sck_le32(h + 22) == 0xFFFFFFFFu);
    CHECK(sck_le16(h + 26) == 14 && sck_le16(h + 28) == 192 - 67 - 30 - 14);
    CHECK(sck_le16(h + 44) == 0x0001 && sck_le16(h + 46) == 16);
    CHECK(sck_le64(h + 48) == GIB6 && sck_le64(h + 56) == GIB6);
    CHECK(sck_le16(h + 64) == 0x4246 && sck_le16(h + 66) == 192 - 67 - 30 - 14 - 20 - 4);
    /* version's local header needs no ZIP64 (small size; the offset is not in a local header) */
    h = p.hdr.data + p.seg[4].buf_off;
    CHECK(sck_le32(h) == 0x04034b50u && sck_le16(h + 4) == 20 && sck_le32(h + 18) == 2);

    /* central directory and end records */
    uint64_t cd_off = p.payload_off[2] + 2;
    const uint8_t *c = p.hdr.data + p.seg[6].buf_off;
    CHECK(sck_le32(c) == 0x02014b50u && sck_le16(c + 6) == 20 && sck_le32(c + 42) == 0);
    c += 46 + 16;
    CHECK(sck_le32(c) == 0x02014b50u && sck_le16(c + 6) == 45);
    CHECK(sck_le32(c + 20) == 0xFFFFFFFFu && sck_le32(c + 24) == 0xFFFFFFFFu && sck_le32(c + 42) == 67);
    CHECK(sck_le16(c + 30) == 20 && sck_le16(c + 60) == 0x0001 && sck_le16(c + 62) == 16);
    CHECK(sck_le64(c + 64) == GIB6 && sck_le64(c + 72) == GIB6);
    c += 46 + 14 + 20;
    CHECK(sck_le32(c) == 0x02014b50u && sck_le16(c + 6) == 45 && sck_le32(c + 20) == 2 && sck_le32(c + 24) == 2);
    CHECK(sck_le32(c + 42) == 0xFFFFFFFFu && sck_le16(c + 30) == 12);
    CHECK(sck_le16(c + 61) == 0x0001 && sck_le16(c + 63) == 8 && sck_le64(c + 65) == lho_v);
    c += 46 + 15 + 12;
    uint64_t cd_size = (uint64_t)(c - (p.hdr.data + p.seg[6].buf_off));
    CHECK(cd_size == 62 + 80 + 73);
    CHECK(sck_le32(c) == 0x06064b50u && sck_le64(c + 4) == 44 && sck_le16(c + 14) == 45);
    CHECK(sck_le64(c + 24) == 3 && sck_le64(c + 32) == 3);
    CHECK(sck_le64(c + 40) == cd_size && sck_le64(c + 48) == cd_off);
    c += 56;
    CHECK(sck_le32(c) == 0x07064b50u && sck_le32(c + 4) == 0 && sck_le64(c + 8) == cd_off + cd_size && sck_le32(c + 16) == 1);
    c += 20;
    CHECK(sck_le32(c) == 0x06054b50u && sck_le16(c + 8) == 3 && sck_le16(c + 10) == 3);
    CHECK(sck_le32(c + 12) == cd_size && sck_le32(c + 16) == 0xFFFFFFFFu);
    CHECK(p.seg[6].len == cd_size + 56 + 20 + 22);
    CHECK(p.total == cd_off + cd_size + 56 + 20 + 22);
    uint64_t sum = 0;
    for (size_t i = 0; i < p.nseg; i++) sum += p.seg[i].len;
    CHECK(sum == p.total);
    zip_plan_free(&p);
}

/* The 6 GiB plan written sparsely (headers and small payloads only) and read back by us and Python. */
TEST(zip64_sparse_file_round_trip) {
    zip_entry e[3] = {mk_entry("data.pkl", "abc", 3), {"data/0", NULL, GIB6, 0x12345678u}, mk_entry("version", "3\n", 2)};
    zip_plan p;
    REQUIRE_OK(zip_plan_build(&p, e, 3, "archive", 0, 64));
    char path[4200];
    snprintf(path, sizeof path, "%s/sparse.zip", th_tmpdir());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    uint64_t at = 0;
    for (size_t i = 0; i < p.nseg; i++) {
        const zip_segment *s = &p.seg[i];
        if (s->entry < 0) CHECK_OK(sck_pwrite_full(fd, p.hdr.data + s->buf_off, (size_t)s->len, at, path));
        else if (e[s->entry].data) CHECK_OK(sck_pwrite_full(fd, e[s->entry].data, (size_t)s->len, at, path));
        at += s->len;
    }
    zip_dir d;
    int rc = zip_read_dir(zip_pread_fd, &fd, 0, p.total, "sparse.zip", &d);
    CHECK_OK(rc);
    if (rc == 0) {
        CHECK(d.n == 3);
        CHECK(d.rec[1].size == GIB6 && d.rec[1].data_off == 192 && d.rec[1].crc == 0x12345678u);
        CHECK(d.rec[2].data_off == p.payload_off[2] && d.rec[2].size == 2);
        zip_dir_free(&d);
    }
    close(fd);
    if (have_python()) {
        char cmd[8800];
        snprintf(cmd, sizeof cmd,
                 PY " -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); i=z.getinfo('archive/data/0'); "
                 "assert i.file_size==6<<30 and i.compress_size==6<<30; "
                 "assert z.getinfo('archive/version').header_offset==192+(6<<30); "
                 "assert z.read('archive/version')==b'3\\\\n' and z.read('archive/data.pkl')==b'abc'\" '%s'", path);
        CHECK(run_ok(cmd));
    }
    zip_plan_free(&p);
}

TEST(zip64_entry_count_over_65535) {
    enum { N = 70000 };
    char (*names)[16] = malloc(N * sizeof *names);
    zip_entry *e = malloc(N * sizeof *e);
    REQUIRE(names && e);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "e%d", i);
        e[i] = mk_entry(names[i], names[i], 1);
    }
    sck_buf b;
    sck_buf_init(&b);
    REQUIRE_OK(zip_build_mem(&b, e, N, "z", 1));
    size_t q = b.len - 22;
    CHECK(sck_le32(b.data + q) == 0x06054b50u && sck_le16(b.data + q + 8) == 0xFFFF && sck_le16(b.data + q + 10) == 0xFFFF);
    CHECK(sck_le32(b.data + q - 20) == 0x07064b50u);
    CHECK(sck_le32(b.data + q - 76) == 0x06064b50u && sck_le64(b.data + q - 76 + 32) == N);
    zip_dir d;
    REQUIRE_OK(read_mem(b.data, b.len, 0, b.len, &d));
    CHECK(d.n == N);
    CHECK(!strcmp(d.rec[N - 1].name, "e69999") && b.data[d.rec[N - 1].data_off] == 'e');
    zip_dir_free(&d);
    sck_buf_free(&b);
    free(names);
    free(e);
}

/* Hand-made: one stored record "p/abc" = "hello" described entirely through ZIP64 fields. */
static size_t make_zip64_by_hand(uint8_t *z) {
    uint32_t crc = sck_crc32(0, "hello", 5);
    memset(z, 0, 256);
    put32(z, 0x04034b50u); put16(z + 4, 45); put32(z + 14, crc);
    put32(z + 18, 0xFFFFFFFFu); put32(z + 22, 0xFFFFFFFFu); put16(z + 26, 5); put16(z + 28, 20);
    memcpy(z + 30, "p/abc", 5);
    put16(z + 35, 1); put16(z + 37, 16); put64(z + 39, 5); put64(z + 47, 5);
    memcpy(z + 55, "hello", 5);
    uint8_t *c = z + 60; /* central directory */
    put32(c, 0x02014b50u); put16(c + 4, 45); put16(c + 6, 45); put32(c + 16, crc);
    put32(c + 20, 0xFFFFFFFFu); put32(c + 24, 0xFFFFFFFFu); put16(c + 28, 5); put16(c + 30, 32);
    put16(c + 34, 0xFFFF); put32(c + 42, 0xFFFFFFFFu);
    memcpy(c + 46, "p/abc", 5);
    put16(c + 51, 1); put16(c + 53, 28); put64(c + 55, 5); put64(c + 63, 5); put64(c + 71, 0); put32(c + 79, 0);
    size_t cd_size = 46 + 5 + 32;
    uint8_t *r = c + cd_size; /* ZIP64 end record at 143 */
    put32(r, 0x06064b50u); put64(r + 4, 44); put16(r + 12, 45); put16(r + 14, 45);
    put64(r + 24, 1); put64(r + 32, 1); put64(r + 40, cd_size); put64(r + 48, 60);
    uint8_t *l = r + 56;
    put32(l, 0x07064b50u); put64(l + 8, 143); put32(l + 16, 1);
    uint8_t *q = l + 20;
    put32(q, 0x06054b50u); put16(q + 8, 0xFFFF); put16(q + 10, 0xFFFF); put32(q + 12, 0xFFFFFFFFu);
    put32(q + 16, 0xFFFFFFFFu);
    return (size_t)(q + 22 - z);
}

TEST(zip64_hand_made_records) {
    uint8_t z[256], t[256];
    size_t n = make_zip64_by_hand(z);
    REQUIRE(n == 241);
    zip_dir d;
    REQUIRE_OK(read_mem(z, n, 0, n, &d));
    CHECK(d.n == 1 && !strcmp(d.prefix, "p") && !strcmp(d.rec[0].name, "abc"));
    CHECK(d.rec[0].size == 5 && d.rec[0].data_off == 55 && !memcmp(z + 55, "hello", 5));
    zip_dir_free(&d);

    memcpy(t, z, n); t[199] = 'X'; /* locator signature */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "needs ZIP64 records but has no locator");
    memcpy(t, z, n); t[143] = 'X';
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "bad ZIP64 end of central directory signature at offset 143");
    memcpy(t, z, n); put64(t + 199 + 8, 180);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "ZIP64 end record offset 180");
    memcpy(t, z, n); put64(t + 199 + 8, UINT64_MAX - 3);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "is outside the archive");
    memcpy(t, z, n); put64(t + 143 + 24, 1ull << 60); put64(t + 143 + 32, 1ull << 60);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "1152921504606846976 entries cannot fit");
    memcpy(t, z, n); put64(t + 143 + 32, 2);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_UNSUPPORTED, "multi-disk");
    memcpy(t, z, n); put64(t + 143 + 48, 1ull << 62);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "central directory (83 bytes at offset 4611686018427387904)");
    memcpy(t, z, n); put16(t + 60 + 51, 2); /* the central ZIP64 extra gets another id */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "record 'p/abc' (central directory offset 60) lacks its ZIP64");
    memcpy(t, z, n); put16(t + 60 + 53, 16); /* too short for usize, csize, lho, disk */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "lacks its ZIP64");
    memcpy(t, z, n); put64(t + 60 + 71, 1ull << 40); /* lho */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "local header of 'p/abc' at offset 1099511627776 lies beyond");
    memcpy(t, z, n); put32(t + 60 + 79, 1); /* disk */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_UNSUPPORTED, "multi-disk");
    memcpy(t, z, n); put64(t + 39, 6); /* local ZIP64 size disagrees */
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "disagrees with the central directory");
    memcpy(t, z, n); put64(t + 60 + 55, 1ull << 33); put64(t + 60 + 63, 1ull << 33); put16(t + 6, 8);
    CHECK_ERR(read_mem(t, n, 0, n, &d), SCK_ERR_FORMAT, "payload of 'p/abc' (8589934592 bytes at offset 55) extends beyond");
}
