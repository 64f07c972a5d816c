/* test_copy_par.c - copy_parallel: every byte of every copy lands, whatever the split (shares cut
 * inside copies, empty copies, more threads than needed), and nothing around the copies is touched. */
#include <stdlib.h>
#include <string.h>

#include "io/copy_par.h"
#include "harness.h"

static void check_split(const size_t *sizes, size_t n, int threads) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += sizes[i] + 64; /* a 64-byte gap after each copy */
    uint8_t *src = malloc(total), *dst = malloc(total);
    copy_op *ops = malloc((n ? n : 1) * sizeof *ops);
    if (!src || !dst || !ops) {
        free(src), free(dst), free(ops);
        th_fail(__FILE__, __LINE__, "out of memory");
        return;
    }
    th_fill(src, total, total + (uint64_t)threads);
    memset(dst, 0xA5, total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ops[i] = (copy_op){dst + at, src + at, sizes[i]};
        at += sizes[i] + 64;
    }
    copy_parallel(ops, n, threads);
    at = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += memcmp(dst + at, src + at, sizes[i]) != 0;
        for (size_t g = 0; g < 64; g++) bad += dst[at + sizes[i] + g] != 0xA5;
        at += sizes[i] + 64;
    }
    CHECK(bad == 0);
    free(src), free(dst), free(ops);
}

TEST(copy_parallel_every_byte_whatever_the_split) {
    const size_t one[] = {COPY_SPLIT_MIN + 12345};               /* one copy cut into every share */
    const size_t mixed[] = {0, 7, 20u << 20, 0, 3, 13u << 20, 1}; /* shares end inside and between copies */
    size_t many[3000];
    for (size_t i = 0; i < 3000; i++) many[i] = 11 * 1024 + (i % 13) * 97; /* about 33 MiB of small pieces */
    for (int t = 0; t <= COPY_THREADS_MAX + 2; t++) {
        check_split(one, 1, t);
        check_split(mixed, sizeof mixed / sizeof *mixed, t);
        check_split(many, 3000, t);
    }
    check_split(NULL, 0, 4);
    const size_t tiny[] = {5, 0, 9}; /* below COPY_SPLIT_MIN: copied on the caller's thread */
    check_split(tiny, 3, 4);
}

TEST(copy_threads_bounded) {
    CHECK(copy_threads(1) >= 1 && copy_threads(1) <= COPY_THREADS_MAX);
    CHECK(copy_threads(1000000) == 1);
    CHECK(copy_threads(0) >= 1);
}
