/* test_rpipe.c - the read-ahead pipe: slices in order and byte-exact (own buffers, caller's buffer,
 * O_DIRECT), ranges starting anywhere, reuse, abandoning a range, a range queued behind another, and
 * read errors with the file named; scatter ranges (runs read into place, slice CRCs). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "base/crc32c.h"
#include "io/rpipe.h"

#define FILE_BYTES ((size_t)(13u << 20) + 777)

static uint8_t *make_file(const char *path) {
    uint8_t *d = malloc(FILE_BYTES);
    if (!d) return NULL;
    th_fill(d, FILE_BYTES, 55);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, FILE_BYTES, f) != FILE_BYTES) {
        if (f) fclose(f);
        free(d);
        return NULL;
    }
    fclose(f);
    return d;
}

/* Drains the current range [off, +len) of the file: slices in order, at `at` (the range's first byte in
 * the caller's buffer; NULL: the pipe's own buffers), matching `want`; sl > 0: no slice longer, and
 * those after the first start on a multiple of it (own buffers) or a multiple of it past the range's
 * start (the caller's buffer: a range of one slice's length is one read). */
static int drain(rpipe *p, uint64_t off, uint64_t len, const uint8_t *at, const uint8_t *want, uint64_t sl) {
    uint64_t got = 0;
    for (;;) {
        const uint8_t *s;
        uint64_t n;
        if (rp_next(p, &s, &n)) return -1;
        if (!n) break;
        if (sl && (n > sl || (got > 0 && (at ? got : off + got) % sl))) return -2;
        if (at && s != at + got) return -3;
        if (memcmp(s, want + off + got, n)) return -4;
        got += n;
    }
    return got == len ? 0 : -5;
}

/* Reads [off, off+len) through the pipe into dst (or its own buffers) and checks it (drain). */
static int read_range(rpipe *p, int fd, int dfd, uint64_t off, uint64_t len, uint8_t *dst, const uint8_t *want) {
    if (rp_start(p, fd, dfd, off, len, dst, "f.bin")) return -1;
    return drain(p, off, len, dst, want, !dst ? RP_SLICE : dfd >= 0 ? (32u << 20) : RP_DST_SLICE);
}

/* The test file, its descriptors (dfd < 0 where O_DIRECT is refused), a pipe and a destination as large
 * as the file (plus two pages). */
typedef struct pipe_fx {
    uint8_t *want, *dst;
    int fd, dfd;
    rpipe *p;
} pipe_fx;

static int fx_open(pipe_fx *x, int helpers) {
    char path[4096];
    snprintf(path, sizeof path, "%s/f.bin", th_tmpdir());
    memset(x, 0, sizeof *x);
    x->fd = x->dfd = -1;
    if (!(x->want = make_file(path))) return -1;
    x->fd = open(path, O_RDONLY);
    x->dfd = open(path, O_RDONLY | O_DIRECT);
    if (x->fd < 0 || rp_new(&x->p, helpers) != SCK_OK) return -1;
    x->dst = mmap(NULL, FILE_BYTES + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return x->dst == MAP_FAILED ? -1 : 0;
}

static void fx_close(pipe_fx *x) {
    rp_free(x->p);
    if (x->dst && x->dst != MAP_FAILED) munmap(x->dst, FILE_BYTES + 8192);
    if (x->fd >= 0) close(x->fd);
    if (x->dfd >= 0) close(x->dfd);
    free(x->want);
}

/* With `helpers` helper threads (two reads in flight, or one). */
static void slices_in_order_exact_in_every_mode(int helpers) {
    pipe_fx x; /* the file, its descriptors, a pipe and a destination */
    REQUIRE(fx_open(&x, helpers) == 0);
    rpipe *p = x.p;
    uint8_t *dst = x.dst, *want = x.want;
    const int fd = x.fd, dfd = x.dfd;
    uint64_t offs[] = {0, 1, 4096, RP_SLICE - 5, RP_SLICE, 3 * RP_SLICE + 100};
    uint64_t lens[] = {0, 1, 4096, RP_SLICE, RP_SLICE + 1, 2 * RP_SLICE + 4097};
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++) {
        for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
            if (offs[i] + lens[k] > FILE_BYTES) continue;
            CHECK(read_range(p, fd, -1, offs[i], lens[k], NULL, want) == 0);
            CHECK(read_range(p, fd, -1, offs[i], lens[k], dst, want) == 0);
            /* O_DIRECT where the file system has it; memory misaligned like the offset, or not */
            CHECK(read_range(p, fd, dfd, offs[i], lens[k], dst + offs[i] % 4096, want) == 0);
            CHECK(read_range(p, fd, dfd, offs[i], lens[k], dst + 8, want) == 0);
        }
    }
    /* The whole file, then a range abandoned after one slice, then another range. */
    CHECK(read_range(p, fd, dfd, 0, FILE_BYTES, dst, want) == 0);
    const uint8_t *s;
    uint64_t n;
    REQUIRE_OK(rp_start(p, fd, -1, 0, FILE_BYTES, NULL, "f.bin"));
    CHECK_OK(rp_next(p, &s, &n));
    CHECK(n == RP_SLICE && !memcmp(s, want, n));
    rp_finish(p);
    CHECK(read_range(p, fd, -1, 5, 3 * RP_SLICE, NULL, want) == 0);
    fx_close(&x);
}

TEST(rpipe_slices_in_order_exact_in_every_mode) { slices_in_order_exact_in_every_mode(RP_HELPERS); }
TEST(rpipe_one_helper_slices_in_order_exact_in_every_mode) { slices_in_order_exact_in_every_mode(1); }

TEST(rpipe_read_error_names_file_and_stops) {
    char path[4096];
    snprintf(path, sizeof path, "%s/f.bin", th_tmpdir());
    uint8_t *want = make_file(path);
    REQUIRE(want);
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0);
    rpipe *p = NULL;
    REQUIRE_OK(rp_new(&p, RP_HELPERS));
    /* Past the end of the file: the slices before it arrive, then "truncated". */
    REQUIRE_OK(rp_start(p, fd, -1, FILE_BYTES - RP_SLICE - 10, 2 * RP_SLICE, NULL, "f.bin"));
    const uint8_t *s;
    uint64_t n;
    int rc = SCK_OK, slices = 0;
    while (!(rc = rp_next(p, &s, &n)) && n) slices++;
    CHECK(rc == SCK_ERR_FORMAT);
    CHECK(strstr(sck_last_error(), "f.bin") != NULL);
    CHECK(strstr(sck_last_error(), "truncated") != NULL);
    CHECK(slices <= 2);
    /* A bad descriptor: SCK_ERR_IO. */
    REQUIRE_OK(rp_start(p, -1, -1, 0, 100, NULL, "nofile"));
    CHECK_ERR(rp_next(p, &s, &n), SCK_ERR_IO, "nofile");
    /* The pipe still works afterwards. */
    CHECK(read_range(p, fd, -1, 0, RP_SLICE + 3, NULL, want) == 0);
    rp_free(p);
    close(fd);
    free(want);
}

/* A range queued behind the current one is read while the caller still drains the current one, and
 * rp_start of the same range takes it over; a queued range replaced, or left when the pipe is finished,
 * is abandoned with nothing landing in its buffer afterwards; its read error comes with its takeover. */
TEST(rpipe_queued_range_is_read_ahead_then_taken_over_or_abandoned) {
    pipe_fx x;
    REQUIRE(fx_open(&x, RP_HELPERS) == 0);
    rpipe *p = x.p;
    uint8_t *dst = x.dst, *want = x.want;
    int fd = x.fd, dfd = x.dfd;
    /* Ranges one after the other into their own places of dst, each queued while the one before is
     * current; O_DIRECT every other range (where the file system has it). */
    uint64_t cut[] = {0, 3u << 20, (3u << 20) + 4096, 7u << 20, (9u << 20) + 5, FILE_BYTES};
    size_t nr = sizeof cut / sizeof *cut - 1;
    REQUIRE_OK(rp_start(p, fd, -1, cut[0], cut[1] - cut[0], dst + cut[0], "f.bin"));
    for (size_t i = 0; i < nr; i++) {
        uint64_t off = cut[i], len = cut[i + 1] - off;
        if (i + 1 < nr) {
            uint64_t o2 = cut[i + 1], l2 = cut[i + 2] - o2;
            CHECK_OK(rp_queue(p, fd, (i + 1) % 2 ? dfd : -1, o2, l2, dst + o2, "f.bin"));
            if (i == 0) { /* read ahead: all of it arrives before anyone drains it */
                for (int t = 0; t < 10000 && !rp_queued_read(p); t++) nanosleep(&(struct timespec){0, 1000000}, NULL);
                CHECK(rp_queued_read(p));
                CHECK(memcmp(dst + o2, want + o2, l2) == 0);
            }
        }
        CHECK(drain(p, off, len, dst + off, want, 0) == 0);
        if (i + 1 < nr) CHECK_OK(rp_start(p, fd, (i + 1) % 2 ? dfd : -1, cut[i + 1], cut[i + 2] - cut[i + 1], dst + cut[i + 1], "f.bin"));
    }
    CHECK(memcmp(dst, want, FILE_BYTES) == 0);
    /* Replaced by another range, or left at rp_finish: nothing of it lands afterwards. */
    for (int how = 0; how < 2; how++) {
        memset(dst, 0, FILE_BYTES);
        REQUIRE_OK(rp_start(p, fd, -1, 0, RP_SLICE, dst, "f.bin"));
        CHECK_OK(rp_queue(p, fd, dfd, 8u << 20, 4u << 20, dst + (8u << 20), "f.bin"));
        if (how == 0) {
            CHECK_OK(rp_start(p, fd, -1, 1u << 20, 1u << 20, dst + (1u << 20), "f.bin"));
            CHECK(drain(p, 1u << 20, 1u << 20, dst + (1u << 20), want, 0) == 0);
        }
        rp_finish(p);
        uint8_t *snap = malloc(4u << 20);
        REQUIRE(snap);
        memcpy(snap, dst + (8u << 20), 4u << 20);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
        CHECK(memcmp(snap, dst + (8u << 20), 4u << 20) == 0);
        free(snap);
    }
    /* A queued range past the end of the file: the error comes once it is current. */
    REQUIRE_OK(rp_start(p, fd, -1, 0, 4096, dst, "f.bin"));
    CHECK_OK(rp_queue(p, fd, -1, FILE_BYTES - 100, 200, dst + 8192, "tail.bin"));
    CHECK(drain(p, 0, 4096, dst, want, 0) == 0);
    REQUIRE_OK(rp_start(p, fd, -1, FILE_BYTES - 100, 200, dst + 8192, "tail.bin"));
    const uint8_t *s;
    uint64_t n;
    CHECK_ERR(rp_next(p, &s, &n), SCK_ERR_FORMAT, "tail.bin");
    CHECK_ERR(rp_queue(p, fd, -1, 0, 10, NULL, "f.bin"), SCK_ERR_INVALID_ARG, "f.bin");
    /* and the pipe works on */
    CHECK(read_range(p, fd, dfd, 5, 3 * RP_SLICE, dst, want) == 0);
    fx_close(&x);
}

/* Runs for a scatter range [off, off+len): gaps and runs of varied lengths (a gap longer than a helper's
 * gap buffer, runs across slice boundaries, a stretch of 300-byte runs with no gaps: more pieces to a
 * slice than one preadv takes), the first run beginning before the range and the last ending after it;
 * run i goes to destination i % 3, each destination's runs packed one after another from dst + d *
 * stride.  Returns the number of runs (at most cap). */
static size_t scatter_runs(uint64_t (*r)[3], size_t cap, uint64_t off, uint64_t len, uint64_t stride) {
    uint64_t pos = off - 300, fill[3] = {0, 0, 0};
    size_t n = 0, dense = 0;
    for (uint64_t i = 0; n < cap && pos < off + len; i++) {
        uint64_t gap = i % 7 == 3 ? 70000 : i % 5 == 1 ? 0 : 1 + (i * 7919) % 3000;
        uint64_t run = i % 11 == 4 ? 600000 : 1 + (i * 104729) % 9000;
        if (pos >= off + RP_SLICE + 100000 && dense < 2000) gap = 0, run = 300, dense++;
        if (n) pos += gap;
        int d = (int)(n % 3);
        r[n][0] = pos;
        r[n][1] = (uint64_t)d * stride + fill[d];
        r[n][2] = run;
        fill[d] += run;
        pos += run;
        n++;
    }
    return n;
}

/* rp_start_scatter: every run's bytes inside the range land where the run says and nothing else of
 * dst is written; the slices come in order with no bytes of their own, and their CRCs (taken by the
 * helpers) combine into the range's; a scatter range past the end of the file fails as truncated. */
static void scatter_runs_land_in_place(int helpers) {
    pipe_fx x;
    REQUIRE(fx_open(&x, helpers) == 0);
    size_t cap = 20000;
    uint64_t(*r)[3] = malloc(cap * sizeof *r);
    REQUIRE(r);
    const uint64_t off = 1000, len = 2 * RP_SLICE + 12345, stride = FILE_BYTES / 3 + 4096;
    size_t n = scatter_runs(r, cap, off, len, stride);
    REQUIRE(n < cap && n > 2000);
    for (int crc_on = 0; crc_on < 2; crc_on++) {
        memset(x.dst, 0xEE, FILE_BYTES + 8192);
        REQUIRE_OK(rp_start_scatter(x.p, x.fd, off, len, (const uint64_t(*)[3])r, n, 0, x.dst, crc_on, "f.bin"));
        uint32_t crc = 0, c;
        uint64_t got = 0, sn;
        const uint8_t *s;
        int bad = 0;
        while (!rp_next_crc(x.p, &s, &sn, &c) && sn) {
            bad |= s != NULL || (got && (off + got) % RP_SLICE) || (!crc_on && c);
            crc = sck_crc32c_combine(crc, c, sn);
            got += sn;
        }
        CHECK(!bad && got == len);
        if (crc_on) CHECK(crc == sck_crc32c(0, x.want + off, len));
        uint8_t *mark = calloc(FILE_BYTES + 8192, 1); /* the bytes of dst that runs own inside the range */
        REQUIRE(mark);
        for (size_t i = 0; i < n && !bad; i++) {
            uint64_t a = r[i][0] > off ? r[i][0] : off, b = r[i][0] + r[i][2] < off + len ? r[i][0] + r[i][2] : off + len;
            if (a >= b) continue;
            uint64_t d = r[i][1] + (a - r[i][0]);
            bad |= memcmp(x.dst + d, x.want + a, b - a) != 0;
            memset(mark + d, 1, b - a);
        }
        CHECK(!bad);
        for (size_t i = 0; i < FILE_BYTES + 8192 && !bad; i++) bad |= !mark[i] && x.dst[i] != 0xEE;
        CHECK(!bad);
        free(mark);
    }
    /* past the end of the file */
    r[0][0] = FILE_BYTES - 50, r[0][1] = 0, r[0][2] = 100;
    REQUIRE_OK(rp_start_scatter(x.p, x.fd, FILE_BYTES - 100, 200, (const uint64_t(*)[3])r, 1, 0, x.dst, 1, "f.bin"));
    const uint8_t *s;
    uint64_t sn;
    uint32_t c;
    CHECK_ERR(rp_next_crc(x.p, &s, &sn, &c), SCK_ERR_FORMAT, "truncated");
    /* and the pipe works on, with a plain range */
    CHECK(read_range(x.p, x.fd, -1, 5, RP_SLICE + 9, NULL, x.want) == 0);
    free(r);
    fx_close(&x);
}

TEST(rpipe_scatter_runs_land_in_place_with_slice_crcs) { scatter_runs_land_in_place(RP_HELPERS); }
TEST(rpipe_one_helper_scatter_runs_land_in_place_with_slice_crcs) { scatter_runs_land_in_place(1); }

/* With O_DIRECT a queued range waits until the current range's reads are done (two items read at once
 * were slower here than one after the other); buffered, it may start while they run.  Ranges of one
 * slice each, queued one behind the other with two helpers, all byte-exact. */
TEST(rpipe_direct_queued_range_waits_for_the_current_reads) {
    pipe_fx x;
    REQUIRE(fx_open(&x, RP_HELPERS) == 0);
    if (x.dfd < 0) { /* no O_DIRECT on this file system: nothing to see */
        fx_close(&x);
        return;
    }
    const uint64_t len = 2u << 20; /* one slice each */
    for (int round = 0; round < 2; round++) {
        int dfd = round == 0 ? x.dfd : -1;
        uint64_t before = rp_overlapped(x.p);
        REQUIRE_OK(rp_start(x.p, x.fd, dfd, 0, len, x.dst, "f.bin"));
        for (uint64_t off = 0; off + 2 * len <= FILE_BYTES - 4096; off += len) {
            CHECK_OK(rp_queue(x.p, x.fd, dfd, off + len, len, x.dst + off + len, "f.bin"));
            CHECK(drain(x.p, off, len, x.dst + off, x.want, 0) == 0);
            CHECK_OK(rp_start(x.p, x.fd, dfd, off + len, len, x.dst + off + len, "f.bin"));
        }
        rp_finish(x.p);
        if (dfd >= 0) CHECK(rp_overlapped(x.p) == before);
    }
    fx_close(&x);
}
