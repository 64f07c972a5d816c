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
