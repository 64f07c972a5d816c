/* test_crc32.c - sck_crc32 (ISA-L's folding CRC) against a bitwise reference of the zip polynomial,
 * over every short length and alignment (the SIMD code has separate head/tail paths) and big buffers. */
#include <stdlib.h>

#include "harness.h"
#include "format/zip.h"

/* Reflected CRC-32, polynomial 0xEDB88320, one bit at a time: slow but obviously right. */
static uint32_t crc_ref(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

TEST(crc32_matches_reference_every_length_and_alignment) {
    uint8_t buf[600];
    th_fill(buf, sizeof buf, 41);
    int bad = 0;
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n + off <= 560; n++)
            if (sck_crc32(0, buf + off, n) != crc_ref(0, buf + off, n)) bad++;
    CHECK(bad == 0);
}

TEST(crc32_chains_across_splits) {
    uint8_t buf[4096 + 7];
    th_fill(buf, sizeof buf, 42);
    uint32_t whole = crc_ref(0, buf, sizeof buf);
    size_t cuts[] = {0, 1, 15, 64, 255, 256, 1000, 4096, sizeof buf};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        size_t c = cuts[i];
        CHECK(sck_crc32(sck_crc32(0, buf, c), buf + c, sizeof buf - c) == whole);
    }
}

TEST(crc32_big_buffer_matches_reference) {
    size_t n = (3u << 20) + 13; /* several MiB, odd length: exercises the wide folding loop */
    uint8_t *b = malloc(n);
    REQUIRE(b);
    th_fill(b, n, 43);
    CHECK(sck_crc32(0, b, n) == crc_ref(0, b, n));
    CHECK(sck_crc32(0xdeadbeefu, b + 1, n - 1) == crc_ref(0xdeadbeefu, b + 1, n - 1));
    free(b);
}
