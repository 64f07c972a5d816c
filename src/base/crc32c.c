/* crc32c.c - CRC-32C through ISA-L's crc32_iscsi, which picks the fastest code for the CPU at run
 * time (SSE4.2 crc32 with PCLMUL folding, or its table-driven base version). */
#include "base/crc32c.h"

#include <isa-l/crc.h>
#include <pthread.h>

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

/* crc32c of a||b from the CRCs of a and b: crc_a times x^(8 len_b) modulo the (reflected) Castagnoli
 * polynomial, plus crc_b; zlib 1.2.12's crc32_combine method.  The powers x^(2^k) are tabled once,
 * so a combine costs at most 64 short products (a few hundred ns), not zlib's old matrix squarings
 * (tens of microseconds): a resharded load combines one per segment read. */
#define CRC32C_POLY 0x82F63B78u

/* a * b modulo the polynomial, both reflected (x^0 is the top bit). */
static uint32_t mult_mod_p(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

static uint32_t x2n_table[67]; /* x^(2^k) mod p: k = 3..66 covers any 64-bit byte length */
static pthread_once_t x2n_once = PTHREAD_ONCE_INIT;

static void x2n_init(void) {
    uint32_t p = 1u << 30; /* x^1 */
    for (int k = 0; k < 67; k++) {
        x2n_table[k] = p;
        p = mult_mod_p(p, p);
    }
}

uint32_t sck_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    pthread_once(&x2n_once, x2n_init);
    uint32_t p = 1u << 31; /* x^0 */
    for (unsigned k = 3; len_b; len_b >>= 1, k++) /* x^(8 len_b): bit j of len_b is x^(2^(j+3)) */
        if (len_b & 1) p = mult_mod_p(x2n_table[k], p);
    return mult_mod_p(p, crc_a) ^ crc_b;
}
