/* crc32c.c - CRC-32C through ISA-L's crc32_iscsi, which picks the fastest code for the CPU at run
 * time (SSE4.2 crc32 with PCLMUL folding, or its table-driven base version). */
#include "crc32c.h"

#include <isa-l/crc.h>

uint32_t sck_crc32c(uint32_t crc, const void *p, size_t n) {
    /* crc32_iscsi neither inverts on entry nor on exit, and takes an int length: invert around it
     * and feed big buffers in 1 GiB pieces. */
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    uint32_t c = ~crc;
    while (n > 0) {
        size_t k = n > (1u << 30) ? (size_t)1u << 30 : n;
        c = crc32_iscsi(b, (int)k, c);
        b += k;
        n -= k;
    }
    return ~c;
}

/* crc32c of a||b from the CRCs of a and b: shift crc_a over len_b zero bytes (GF(2) matrix powers,
 * zlib's crc32_combine method for the reflected Castagnoli polynomial), then add crc_b.  O(log len_b). */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) sq[n] = gf2_times(mat, mat[n]);
}

uint32_t sck_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    if (len_b == 0) return crc_a;
    uint32_t even[32], odd[32]; /* operators for 2^k zero bits */
    odd[0] = 0x82F63B78u;       /* one zero bit */
    for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four zero bits */
    do {                   /* apply len_b zero bytes, one bit of len_b per squaring */
        gf2_square(even, odd);
        if (len_b & 1) crc_a = gf2_times(even, crc_a);
        len_b >>= 1;
        if (!len_b) break;
        gf2_square(odd, even);
        if (len_b & 1) crc_a = gf2_times(odd, crc_a);
        len_b >>= 1;
    } while (len_b);
    return crc_a ^ crc_b;
}
