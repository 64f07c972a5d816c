/* test_zip_hostile.c - the zip reader against hostile archives: truncations, lying sizes and counts,
 * misplaced directories, bad signatures, compression, names, byte flips; and its read callbacks. */
#include "zip_helpers.h"

/* ---- hostile input ---- */

TEST(zip_hostile_every_truncation) {
    sck_buf b;
    small_archive(&b);
    REQUIRE(b.len == SA_LEN);
    zip_dir d;
    for (size_t l = 0; l < b.len; l++) {
        int rc = read_mem(b.data, b.len, 0, l, &d);
        CHECK(rc == SCK_ERR_FORMAT);
        CHECK(d.n == 0 && d.rec == NULL && d.prefix == NULL);
    }
    for (size_t k = 1; k < b.len; k++) CHECK(read_mem(b.data, b.len, k, b.len - k, &d) == SCK_ERR_FORMAT);
    for (size_t l = 0; l < sizeof torch_zip; l++) CHECK(read_mem(torch_zip, sizeof torch_zip, 0, l, &d) == SCK_ERR_FORMAT);
    CHECK_ERR(read_mem(b.data, b.len, 0, 21, &d), SCK_ERR_FORMAT, "t.zip: 21 bytes at offset 0 are too few");
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len - 1, &d), SCK_ERR_FORMAT,
              "t.zip: end of central directory record not found in the 202 bytes before offset 202");
    CHECK_ERR(read_mem(b.data, b.len, 0, 100, &d), SCK_ERR_FORMAT, "not found");
    /* the window is the archive: bytes beyond it are never read */
    CHECK_ERR(read_mem(b.data, b.len, 0, UINT64_MAX, &d), SCK_ERR_FORMAT, "beyond the end of a 203 byte buffer");
    CHECK_ERR(read_mem(b.data, b.len, 10, UINT64_MAX, &d), SCK_ERR_INVALID_ARG, "overflows");
    sck_buf_free(&b);
}

TEST(zip_hostile_lying_sizes) {
    sck_buf b;
    small_archive(&b);
    zip_dir d;
    /* central and local both claim 1000 bytes for x/bb: the payload would leave the window */
    put32(b.data + SA_CD_B + 20, 1000); put32(b.data + SA_CD_B + 24, 1000);
    put32(b.data + SA_LOCAL_B + 18, 1000); put32(b.data + SA_LOCAL_B + 22, 1000);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "t.zip: payload of 'x/bb' (1000 bytes at offset 72) extends beyond the archive end at offset 203");
    /* the same inside a bigger buffer at base 5000: offsets in the message are absolute */
    uint8_t *big = calloc(1, 5000 + b.len + 2000);
    REQUIRE(big);
    memcpy(big + 5000, b.data, b.len);
    CHECK_ERR(read_mem(big, 5000 + b.len + 2000, 5000, b.len, &d), SCK_ERR_FORMAT,
              "(1000 bytes at offset 5072) extends beyond the archive end at offset 5203");
    free(big);
    /* near-2^32 sizes must not wrap */
    put32(b.data + SA_CD_B + 20, 0xFFFFFFFEu); put32(b.data + SA_CD_B + 24, 0xFFFFFFFEu);
    put32(b.data + SA_LOCAL_B + 18, 0xFFFFFFFEu); put32(b.data + SA_LOCAL_B + 22, 0xFFFFFFFEu);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "extends beyond");
    /* only the central directory lies: the local header disagrees */
    sck_buf_free(&b);
    small_archive(&b);
    put32(b.data + SA_CD_B + 20, 9); put32(b.data + SA_CD_B + 24, 9);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "local header of 'x/bb' at offset 38 disagrees with the central directory (sizes 10/10 vs 9");
    sck_buf_free(&b);
    small_archive(&b);
    put32(b.data + SA_CD_B + 24, 11);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "has compressed size 10 != size 11");
    sck_buf_free(&b);
    small_archive(&b);
    put32(b.data + SA_CD_B + 16, 0xdeadbeef);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "crc");
    sck_buf_free(&b);
    /* torch's data descriptor archives: the central directory size alone decides */
    uint8_t t[sizeof torch_zip];
    memcpy(t, torch_zip, sizeof t);
    put32(t + 0x210 + 20, 0x10000); put32(t + 0x210 + 24, 0x10000);
    CHECK_ERR(read_mem(t, sizeof t, 0, sizeof t, &d), SCK_ERR_FORMAT, "payload of 'archive/data/0' (65536 bytes at offset 320)");
}

TEST(zip_hostile_central_directory_placement) {
    sck_buf b;
    small_archive(&b);
    zip_dir d;
    uint8_t *q = b.data + SA_EOCD;
    CHECK(eocd_at(b.data, b.len) == SA_EOCD);
    put32(q + 16, 0x7FFFFFF0u);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "t.zip: central directory (99 bytes at offset 2147483632) does not lie before the end records at offset 181");
    put32(q + 16, SA_CD);
    put32(q + 12, 0xFFFFFF00u);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "does not lie before the end records");
    put32(q + 12, 98); /* one byte short: the second entry runs past */
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "entry at offset 131 runs past the directory end");
    put32(q + 12, 50);
    put32(q + 16, SA_CD + 49);
    put16(q + 8, 1); put16(q + 10, 1); /* starts at x/bb: a valid one-entry directory */
    REQUIRE_OK(read_mem(b.data, b.len, 0, b.len, &d));
    CHECK(d.n == 1 && !strcmp(d.rec[0].name, "bb"));
    zip_dir_free(&d);
    put32(q + 12, 60); put32(q + 16, SA_CD + 39);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "bad central directory signature at offset 121");
    put32(q + 12, 99); put32(q + 16, SA_CD); put16(q + 8, 1); put16(q + 10, 1);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "has 50 bytes after its 1 entries");
    sck_buf_free(&b);
}

TEST(zip_hostile_entry_count) {
    sck_buf b;
    small_archive(&b);
    zip_dir d;
    put16(b.data + SA_EOCD + 8, 0xFFFE); put16(b.data + SA_EOCD + 10, 0xFFFE);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "t.zip: 65534 entries cannot fit in the central directory of 99 bytes at offset 82");
    put16(b.data + SA_EOCD + 8, 3); put16(b.data + SA_EOCD + 10, 3); /* 3 * 46 > 99 */
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "3 entries cannot fit");
    put16(b.data + SA_EOCD + 8, 0xFFFF); put16(b.data + SA_EOCD + 10, 0xFFFF);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "has no locator");
    put16(b.data + SA_EOCD + 8, 1); put16(b.data + SA_EOCD + 10, 2);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_UNSUPPORTED, "multi-disk archive (end record at offset 181)");
    put16(b.data + SA_EOCD + 8, 2); put16(b.data + SA_EOCD + 4, 1);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_UNSUPPORTED, "multi-disk");
    put16(b.data + SA_EOCD + 4, 0); put16(b.data + SA_EOCD + 8, 0); put16(b.data + SA_EOCD + 10, 0);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "has 99 bytes after its 0 entries");
    sck_buf_free(&b);
    /* torch's ZIP64 end record with a huge count */
    uint8_t t[sizeof torch_zip];
    memcpy(t, torch_zip, sizeof t);
    put64(t + 0x289 + 24, 1ull << 40); put64(t + 0x289 + 32, 1ull << 40);
    CHECK_ERR(read_mem(t, sizeof t, 0, sizeof t, &d), SCK_ERR_FORMAT, "1099511627776 entries cannot fit");
}

TEST(zip_hostile_bad_signatures) {
    sck_buf b;
    zip_dir d;
    small_archive(&b);
    b.data[0] ^= 1;
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "t.zip: bad local header signature for 'x/a' at offset 0");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[SA_LOCAL_B + 3] = 0;
    CHECK_ERR(read_mem(b.data, b.len, 100, b.len, &d), SCK_ERR_FORMAT, "beyond the end"); /* window past the buffer */
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "bad local header signature for 'x/bb' at offset 38");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[SA_CD_B + 1] = 'Q';
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "bad central directory signature at offset 131");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[SA_EOCD + 2] = 0;
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "end of central directory record not found");
    sck_buf_free(&b);
    uint8_t t[sizeof torch_zip];
    memcpy(t, torch_zip, sizeof t);
    t[0x289] = 'p';
    CHECK_ERR(read_mem(t, sizeof t, 0, sizeof t, &d), SCK_ERR_FORMAT, "bad ZIP64 end of central directory signature at offset 649");
    memcpy(t, torch_zip, sizeof t);
    t[0x16b] = 0;
    CHECK_ERR(read_mem(t, sizeof t, 0, sizeof t, &d), SCK_ERR_FORMAT, "bad local header signature for 'archive/version' at offset 360");
}

TEST(zip_hostile_compressed_and_encrypted) {
    sck_buf b;
    zip_dir d;
    small_archive(&b);
    put16(b.data + SA_CD_B + 10, 8);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_UNSUPPORTED,
              "t.zip: record 'x/bb' (central directory offset 131) is compressed (method 8)");
    sck_buf_free(&b);
    small_archive(&b);
    put16(b.data + SA_LOCAL_B + 8, 8);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_UNSUPPORTED,
              "record 'x/bb' is compressed (method 8 in the local header at offset 38)");
    sck_buf_free(&b);
    small_archive(&b);
    put16(b.data + SA_CD + 8, 1);
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_UNSUPPORTED, "record 'x/a' (central directory offset 82) is encrypted");
    sck_buf_free(&b);
}

TEST(zip_hostile_names) {
    sck_buf b;
    zip_dir d;
    small_archive(&b);
    b.data[SA_LOCAL_B + 30] = 'y'; b.data[SA_CD_B + 46] = 'y';
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "record 'y/bb' (central directory offset 131) is not under the top folder 'x' of the first record");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[SA_CD_B + 48] = 'c';
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT,
              "local header at offset 38 names another record than the central directory's 'x/cb'");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[30 + 1] = '_'; b.data[SA_CD + 46 + 1] = '_';
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "record 'x_a' (central directory offset 82) is not a file inside a top folder");
    sck_buf_free(&b);
    small_archive(&b);
    b.data[SA_CD + 46 + 1] = 0;
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "empty name or one with a NUL byte");
    sck_buf_free(&b);
    /* x/a1 and x/a2 renamed to the same name */
    zip_entry e[2] = {mk_entry("a1", "p", 1), mk_entry("a2", "q", 1)};
    sck_buf_init(&b);
    REQUIRE_OK(zip_build_mem(&b, e, 2, "x", 1));
    size_t lb = 30 + 4 + 1, cb = lb + 30 + 4 + 1 + 46 + 4;
    REQUIRE(b.data[lb + 30 + 3] == '2' && b.data[cb + 46 + 3] == '2');
    b.data[lb + 30 + 3] = '1'; b.data[cb + 46 + 3] = '1';
    CHECK_ERR(read_mem(b.data, b.len, 0, b.len, &d), SCK_ERR_FORMAT, "t.zip: duplicate record 'x/a1' (second payload at offset 69)");
    sck_buf_free(&b);
}

TEST(zip_hostile_byte_flips_never_crash) {
    sck_buf b;
    small_archive(&b);
    uint8_t t[sizeof torch_zip];
    static const uint8_t vals[] = {0x00, 0xFF, 0x01, 0x80, 0x7F};
    int ok = 0, failed = 0;
    for (size_t i = 0; i < sizeof torch_zip; i++) {
        for (size_t v = 0; v < sizeof vals; v++) {
            memcpy(t, torch_zip, sizeof t);
            t[i] = vals[v];
            zip_dir d;
            int rc = read_mem(t, sizeof t, 0, sizeof t, &d);
            if (rc == 0) {
                ok++;
                for (size_t k = 0; k < d.n; k++) CHECK(d.rec[k].data_off + d.rec[k].size <= sizeof t);
                zip_dir_free(&d);
            } else {
                failed++;
                CHECK(rc == SCK_ERR_FORMAT || rc == SCK_ERR_UNSUPPORTED);
                CHECK(strstr(sck_last_error(), "t.zip: ") == sck_last_error());
            }
        }
    }
    CHECK(ok > 0 && failed > 0);
    sck_buf_free(&b);
}

TEST(zip_reader_accepts_comment_and_locates_last_eocd) {
    sck_buf b;
    small_archive(&b);
    /* a comment that itself contains an end-record signature */
    put16(b.data + SA_EOCD + 20, 30);
    uint8_t comment[30] = {0};
    memcpy(comment, "PK\x05\x06", 4);
    REQUIRE_OK(sck_buf_append(&b, comment, sizeof comment));
    zip_dir d;
    REQUIRE_OK(read_mem(b.data, b.len, 0, b.len, &d));
    CHECK(d.n == 2 && !strcmp(d.rec[1].name, "bb") && d.rec[1].data_off == 72 && d.rec[1].size == 10);
    zip_dir_free(&d);
    sck_buf_free(&b);
}

TEST(zip_pread_callbacks) {
    uint8_t data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, out[10] = {0};
    zip_mem m = {data, 10};
    CHECK_OK(zip_pread_mem(&m, out, 4, 6));
    CHECK(out[0] == 7 && out[3] == 10);
    CHECK_OK(zip_pread_mem(&m, out, 0, 10));
    CHECK_ERR(zip_pread_mem(&m, out, 5, 6), SCK_ERR_FORMAT, "read of 5 bytes at offset 6 beyond the end of a 10 byte buffer");
    CHECK_ERR(zip_pread_mem(&m, out, 1, UINT64_MAX), SCK_ERR_FORMAT, "beyond the end");
    char path[4200];
    snprintf(path, sizeof path, "%s/p.bin", th_tmpdir());
    REQUIRE(write_file(path, data, sizeof data));
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    CHECK_OK(zip_pread_fd(&fd, out, 3, 2));
    CHECK(out[0] == 3 && out[2] == 5);
    CHECK_ERR(zip_pread_fd(&fd, out, 3, 9), SCK_ERR_FORMAT, "truncated");
    close(fd);
    zip_dir d;
    CHECK_ERR(zip_read_dir(NULL, NULL, 0, 10, "f", &d), SCK_ERR_INVALID_ARG, "f: NULL read callback");
    CHECK(zip_read_dir(zip_pread_mem, &m, 0, 10, "f", NULL) == SCK_ERR_INVALID_ARG);
    CHECK(zip_find(NULL, "a") == NULL);
    zip_dir_free(NULL);
    zip_plan_free(NULL);
}

/* The records ti_entries makes carry the CRC-32 of their data: the constant it uses for "3\n", the
 * data.pkl CRC it is given, the payload's; and there is no byteorder record. */
TEST(torch_item_entries_carry_their_crcs) {
    static const uint8_t pkl_bytes[] = {0x80, 0x02, 0x7d, 0x71, 0x00, 0x2e};
    static const uint8_t payload[] = {1, 2, 3, 4, 5, 6, 7, 8};
    sck_buf pkl = {(uint8_t *)(uintptr_t)pkl_bytes, sizeof pkl_bytes, sizeof pkl_bytes};
    for (int with = 0; with < 2; with++) {
        zip_entry e[4];
        size_t n = 0;
        ti_entries(e, &n, &pkl, sck_crc32(0, pkl_bytes, sizeof pkl_bytes), with ? payload : NULL, with ? sizeof payload : 0,
                   with ? sck_crc32(0, payload, sizeof payload) : 0);
        CHECK(n == (size_t)(2 + with));
        for (size_t k = 0; k < n; k++) CHECK(strcmp(e[k].name, "byteorder") != 0); /* little-endian by default */
        for (size_t k = 0; k < n; k++) CHECK(e[k].crc == sck_crc32(0, e[k].data, (size_t)e[k].size));
    }
}
