/* test_crc32c_combine.c - sck_crc32c_combine against sck_crc32c over whole buffers: random splits
 * into two and many parts (empty parts included), and lengths past 4 GiB through the matrix only. */
#include <stdlib.h>

#include "base/crc32c.h"
#include "harness.h"

TEST(crc32c_combine_matches_whole_buffer_over_random_splits) {
    enum { N = 1 << 16 };
    uint8_t *buf = malloc(N);
    REQUIRE(buf != NULL);
    th_fill(buf, N, 61);
    srand(7);
    int bad = 0;
    for (int t = 0; t < 2000; t++) {
        size_t n = t < 64 ? (size_t)t : (size_t)rand() % N, k = n ? (size_t)rand() % (n + 1) : 0;
        if (t % 7 == 0) k = 0;
        if (t % 11 == 0) k = n;
        uint32_t a = sck_crc32c(0, buf, k), b = sck_crc32c(0, buf + k, n - k);
        bad += sck_crc32c_combine(a, b, n - k) != sck_crc32c(0, buf, n);
    }
    CHECK(bad == 0);
    /* Many parts, combined left to right as load does. */
    for (int t = 0; t < 200; t++) {
        size_t pos = 0;
        uint32_t acc = 0;
        while (pos < N) {
            size_t len = (size_t)rand() % 5000;
            if (len > N - pos) len = N - pos;
            acc = sck_crc32c_combine(acc, sck_crc32c(0, buf + pos, len), len);
            pos += len;
        }
        bad += acc != sck_crc32c(0, buf, N);
    }
    CHECK(bad == 0);
    CHECK(sck_crc32c_combine(0x12345678u, 0, 0) == 0x12345678u);
    CHECK(sck_crc32c_combine(0, sck_crc32c(0, "123456789", 9), 9) == 0xE3069283u);
    CHECK(sck_crc32c_combine(sck_crc32c(0, "1234", 4), sck_crc32c(0, "56789", 5), 5) == 0xE3069283u);
    free(buf);
}

/* Zero runs: z(n) = CRC-32C of n zero bytes.  Computed directly up to 1 MiB, beyond only by combining;
 * every way of splitting a length must agree, also past 2^32 (lengths are 64-bit). */
TEST(crc32c_combine_beyond_4_gib) {
    enum { M = 1 << 20 };
    uint8_t *z = calloc(M, 1);
    REQUIRE(z != NULL);
    uint32_t z1m = sck_crc32c(0, z, M), z3 = sck_crc32c(0, z, 3);
    /* Direct check of a long zero extension of non-zero data. */
    uint32_t d = sck_crc32c(0, "shardckpt", 9);
    CHECK(sck_crc32c_combine(d, z1m, M) == sck_crc32c(d, z, M));
    free(z);
    uint32_t zp[14]; /* z(2^(20+k)) by doubling */
    zp[0] = z1m;
    for (int k = 1; k < 14; k++) zp[k] = sck_crc32c_combine(zp[k - 1], zp[k - 1], (uint64_t)M << (k - 1));
    /* 5 GiB + 3 = 4 GiB + 1 GiB + 3, in three orders */
    uint64_t g1 = (uint64_t)1 << 30, g4 = (uint64_t)1 << 32;
    uint32_t x = sck_crc32c_combine(sck_crc32c_combine(zp[12], zp[10], g1), z3, 3);
    uint32_t y = sck_crc32c_combine(z3, sck_crc32c_combine(zp[10], zp[12], g4), g4 + g1);
    uint32_t w = sck_crc32c_combine(sck_crc32c_combine(zp[10], z3, 3), zp[12], g4);
    CHECK(x == y);
    CHECK(x == w);
    CHECK(zp[13] == sck_crc32c_combine(zp[12], zp[12], g4)); /* 8 GiB */
    CHECK(zp[13] != zp[12]);
    /* Associativity with non-zero parts longer than 4 GiB. */
    uint32_t a = 0xDEADBEEFu, b = 0x01234567u, c = 0x89ABCDEFu;
    uint64_t lb = g4 + 12345, lc = 3 * g4 + 7;
    CHECK(sck_crc32c_combine(a, sck_crc32c_combine(b, c, lc), lb + lc) == sck_crc32c_combine(sck_crc32c_combine(a, b, lb), c, lc));
}
