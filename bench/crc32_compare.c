/* crc32_compare.c - CRC-32 (zip polynomial) throughput: zlib vs ISA-L vs libdeflate, the measurement
 * behind sck_crc32's choice of ISA-L.  `make bench-crc` (needs zlib1g-dev and libdeflate-dev too). */
#include <isa-l/crc.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zlib.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    size_t sizes[] = {64, 1024, 64 << 10, 1 << 20, 256u << 20};
    size_t total = 1ull << 30;
    printf("| buffer | zlib GB/s | ISA-L GB/s | libdeflate GB/s |\n|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s], reps = total / n;
        unsigned char *b = malloc(n);
        if (!b) return 1;
        for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131 + 7);
        unsigned r1 = 0, r2 = 0, r3 = 0;
        double t0 = now_s();
        for (size_t i = 0; i < reps; i++) r1 ^= (unsigned)crc32(0, b, (uInt)n);
        double t1 = now_s();
        for (size_t i = 0; i < reps; i++) r2 ^= crc32_gzip_refl(0, b, n);
        double t2 = now_s();
        for (size_t i = 0; i < reps; i++) r3 ^= libdeflate_crc32(0, b, n);
        double t3 = now_s();
        if (r1 != r2 || r2 != r3) return fprintf(stderr, "CRC results differ at n=%zu\n", n), 1;
        printf("| %zu B | %.2f | %.2f | %.2f |\n", n, (double)total / (t1 - t0) / 1e9, (double)total / (t2 - t1) / 1e9,
               (double)total / (t3 - t2) / 1e9);
        free(b);
    }
    return 0;
}
