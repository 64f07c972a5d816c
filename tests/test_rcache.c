/* test_rcache.c - the read windows: bytes served exactly whether a window is small (it has only held a
 * few KiB so far) or grown to a full one, hits without a read, the least recently used window reused,
 * a file forgotten, and bad ranges refused. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "io/rcache.h"

#define FBYTES ((size_t)(9u << 20) + 123)

TEST(rcache_small_and_grown_windows_serve_exact_bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/w.bin", th_tmpdir());
    uint8_t *want = malloc(FBYTES);
    REQUIRE(want);
    th_fill(want, FBYTES, 7);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(want, 1, FBYTES, f) == FBYTES);
    fclose(f);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    rcache c;
    rc_init(&c);
    const uint8_t *p;
    /* Header-sized fills first (every window small), then full ones into the same windows (grown),
     * then small ones again (into grown windows), over and over: the bytes are the file's each time. */
    struct { uint64_t off, n, lo, hi; } seq[] = {
        {100, 50, 0, 4096},           {70000, 10, 65536, 65536 + RC_SMALL}, {1u << 20, 4096, 1u << 20, (1u << 20) + 32768},
        {(3u << 20) + 5, 99, 3u << 20, (3u << 20) + 8192},               {(5u << 20) + 1, 1u << 20, 5u << 20, (5u << 20) + RC_CAP},
        {200, 3000, 0, RC_CAP},       {(2u << 20) + 17, 600000, 2u << 20, (2u << 20) + RC_CAP}, {(4u << 20) + 3, 10, 4u << 20, (4u << 20) + 4096},
        {FBYTES - 100, 100, FBYTES - 4096, FBYTES}, {6u << 20, 2u << 20, 6u << 20, FBYTES},   {7000, 100, 4096, 4096 + RC_SMALL},
    };
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
            REQUIRE_OK(rc_get(&c, fd, seq[i].off, seq[i].n, seq[i].lo, seq[i].hi, "w.bin", &p));
            CHECK(memcmp(p, want + seq[i].off, seq[i].n) == 0);
        }
    }
    /* A hit needs no read: with the descriptor closed, bytes a window holds still come. */
    REQUIRE_OK(rc_get(&c, fd, 6u << 20, 4096, 6u << 20, (6u << 20) + 8192, "w.bin", &p));
    int fd2 = dup(fd);
    close(fd);
    REQUIRE_OK(rc_get(&c, fd, (6u << 20) + 100, 1000, 6u << 20, (6u << 20) + 8192, "w.bin", &p));
    CHECK(memcmp(p, want + (6u << 20) + 100, 1000) == 0);
    /* Forgotten: the next get reads again, and fails on the closed descriptor, naming the file. */
    rc_forget(&c, fd);
    CHECK_ERR(rc_get(&c, fd, (6u << 20) + 100, 1000, 6u << 20, (6u << 20) + 8192, "w.bin", &p), SCK_ERR_IO, "w.bin");
    /* A window that cannot hold the request, or larger than a window */
    CHECK_ERR(rc_get(&c, fd2, 100, 50, 120, 4096, "w.bin", &p), SCK_ERR_INVALID_ARG, "w.bin");
    CHECK_ERR(rc_get(&c, fd2, 0, 50, 0, RC_CAP + 1, "w.bin", &p), SCK_ERR_INVALID_ARG, "w.bin");
    rc_free(&c);
    close(fd2);
    free(want);
}
