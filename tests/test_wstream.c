/* test_wstream.c - the background writer: byte-exact files from mixed copied / by-reference appends in
 * buffered and O_DIRECT modes (small staging buffers, so buffers cycle), and writer errors surfacing
 * in the caller's thread with their message. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "io/io_hook.h"
#include "io/wstream.h"
#include "io/storage.h"

static uint8_t *read_all(const char *path, size_t *n) {
    uint8_t *d = NULL;
    return sck_read_file(path, &d, n) == SCK_OK ? d : NULL;
}

/* 1 if the file at path holds exactly the n bytes at want. */
static int file_is(const char *path, const void *want, size_t n) {
    size_t got_n = 0;
    uint8_t *got = read_all(path, &got_n);
    int same = got && got_n == n && memcmp(got, want, n) == 0;
    free(got);
    return same;
}

/* 1 if the file at path holds `count` copies of the n bytes at want. */
static int file_is_repeated(const char *path, const void *want, size_t n, size_t count) {
    size_t got_n = 0;
    uint8_t *got = read_all(path, &got_n);
    int same = got && got_n == n * count;
    for (size_t i = 0; same && i < count; i++) same = memcmp(got + i * n, want, n) == 0;
    free(got);
    return same;
}

/* Appends a fixed mix of pieces (tiny, unaligned, large aligned, large unaligned) from `src`. */
static int append_mix(wstream *w, const uint8_t *src, size_t *total) {
    static const size_t sizes[] = {3, 100, 4093, 1 << 20, 7, (1 << 20) + 5, 300000, 64, 2 << 20, 1};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int rc = ws_append(w, src + off, sizes[i], 1);
        if (rc) return rc;
        off += sizes[i];
        if (ws_pos(w) != off) return SCK_ERR_INVALID_ARG;
    }
    *total = off;
    return SCK_OK;
}

static void check_mode_ex(int direct, int do_fsync, uint64_t stage, int close_start) {
    const char *dir = th_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/f.bin", dir);
    size_t cap = 6 << 20;
    /* page-aligned source, so the large aligned pieces can go by reference even with O_DIRECT */
    uint8_t *src = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(src != MAP_FAILED);
    th_fill(src, cap, 7 + (uint64_t)direct);
    ws_opts o = {stage, 2, direct, do_fsync, NULL};
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &o));
    size_t total = 0;
    CHECK_OK(append_mix(w, src, &total));
    if (close_start) { /* the writer finishes the file (last writes, truncation, fsync) on its own */
        CHECK_OK(ws_close_start(w));
        CHECK_OK(ws_close_start(w)); /* again: the same answer, nothing more */
    }
    CHECK_OK(ws_close(w));
    size_t n = 0;
    uint8_t *got = read_all(path, &n);
    REQUIRE(got);
    CHECK(n == total);
    CHECK(n == total && memcmp(got, src, total) == 0);
    free(got);
    munmap(src, cap);
}

static void check_mode(int direct, int do_fsync, uint64_t stage) { check_mode_ex(direct, do_fsync, stage, 0); }

TEST(wstream_buffered_mixed_appends_exact) { check_mode(0, 1, 64 << 10); }
TEST(wstream_close_started_early_finishes_the_file) {
    check_mode_ex(0, 1, 64 << 10, 1);
    check_mode_ex(1, 1, 64 << 10, 1);
}
TEST(wstream_buffered_no_fsync_default_stage) { check_mode(0, 0, 0); }
TEST(wstream_direct_mixed_appends_exact_and_truncated) { check_mode(1, 1, 64 << 10); }

/* Larger than the writeback window, so streaming writeback and page dropping run. */
TEST(wstream_buffered_streams_writeback_over_windows) {
    const char *dir = th_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/big.bin", dir);
    size_t piece = 9 << 20, count = 8;
    uint8_t *src = malloc(piece);
    REQUIRE(src);
    th_fill(src, piece, 11);
    ws_opts o = {1 << 20, 2, 0, 1, NULL};
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &o));
    for (size_t i = 0; i < count; i++) {
        CHECK_OK(ws_append(w, src, 5, 0));            /* a small copied header between large pieces */
        CHECK_OK(ws_append(w, src, piece, 1));
    }
    CHECK_OK(ws_close(w));
    size_t n = 0;
    uint8_t *got = read_all(path, &n);
    REQUIRE(got);
    CHECK(n == count * (piece + 5));
    for (size_t i = 0; i < count && n == count * (piece + 5); i++) {
        CHECK(memcmp(got + i * (piece + 5), src, 5) == 0);
        CHECK(memcmp(got + i * (piece + 5) + 5, src, piece) == 0);
    }
    free(got);
    free(src);
}

/* Pages of the first len bytes of dir/name in the page cache (fx_resident); -1 if that cannot be told. */
static long resident_pages(const char *dir, const char *name, uint64_t len) {
    long n = 0;
    for (uint64_t off = 0; off < len; off += 4096) {
        int r = fx_resident(dir, name, off);
        if (r < 0) return -1;
        n += r;
    }
    return n;
}

/* 1 if dir's file system drops a written file's clean pages as the writer asks it to (sync_file_range,
 * then POSIX_FADV_DONTNEED): tmpfs keeps them all, and overlayfs's sync_file_range does not reach the
 * real file's pages. */
static int drops_pages(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/probe.bin", dir);
    static const uint8_t buf[1 << 16];
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) return 0;
    int ok = write(fd, buf, sizeof buf) == (ssize_t)sizeof buf &&
             sync_file_range(fd, 0, sizeof buf, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) == 0 &&
             posix_fadvise(fd, 0, sizeof buf, POSIX_FADV_DONTNEED) == 0;
    close(fd);
    ok = ok && resident_pages(dir, "probe.bin", sizeof buf) == 0;
    remove(path);
    return ok;
}

/* A directory where page-cache residency means something (drops_pages): th_tmpdir, else a new one under
 * /var/tmp or the working directory; NULL if there is none. */
static const char *disk_dir(char *buf, size_t cap) {
    if (drops_pages(th_tmpdir())) return th_tmpdir();
    const char *cand[] = {"/var/tmp", "."};
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
        snprintf(buf, cap, "%s/sck_wstream_XXXXXX", cand[i]);
        if (!mkdtemp(buf)) continue;
        if (drops_pages(buf)) return buf;
        rmdir(buf);
    }
    return NULL;
}

/* Writeback is started per 8 MiB window and a window's pages are dropped once 32 MiB after it are under
 * way: of a 48 MiB fsynced file written in 1 MiB pieces, the first 16 MiB have left the page cache by the
 * close (with one 32 MiB window none would have: the disk would wait for 32 MiB to be written before
 * it started). */
TEST(wstream_buffered_drops_pages_a_window_at_a_time) {
    char own[4096];
    const char *dir = disk_dir(own, sizeof own);
    if (!dir) fprintf(stderr, "note: no file system here drops clean pages on request; the file's contents only are checked\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/drop.bin", dir ? dir : th_tmpdir());
    size_t piece = 1 << 20, count = 48;
    uint8_t *src = malloc(piece);
    REQUIRE(src);
    th_fill(src, piece, 12);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){1 << 20, 2, 0, 1, NULL}));
    for (size_t i = 0; i < count; i++) CHECK_OK(ws_append(w, src, piece, 1));
    CHECK_OK(ws_close(w));
    if (dir) CHECK(resident_pages(dir, "drop.bin", 16u << 20) == 0);
    CHECK(file_is_repeated(path, src, piece, count));
    free(src);
    remove(path);
    if (dir == own) rmdir(own);
}

/* Many small by-reference pieces between small copied ones, as a save of small tensors appends them
 * (header, tensor, header...): byte-exact in both modes.  Buffered, the pieces from WS_IOV_MIN bytes
 * on are written from the caller's memory (only headers and the smaller pieces are copied), and
 * batches end on each of their limits: the list (512 pieces), the bytes spanned (4 MiB, with pieces
 * of 200 KiB) and a full staging buffer (a run of copied pieces).  With O_DIRECT everything short
 * of WS_REF_MIN is copied. */
static void check_small_pieces(int direct) {
    char path[4096];
    snprintf(path, sizeof path, "%s/small%d.bin", th_tmpdir(), direct);
    size_t cap = 24 << 20;
    uint8_t *src = malloc(cap), *want = malloc(cap);
    REQUIRE(src && want);
    th_fill(src, cap, 21);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){1 << 20, 2, direct, 1, NULL}));
    size_t n = 0, from = 0, copied = 0;
    uint64_t next = 1;
    int i = 0;
    for (; i < 6000 && n + (300u << 10) < cap; i++) {
        next = next * 6364136223846793005ull + 1442695040888963407ull;
        size_t len, hdr = 1 + (size_t)(next >> 59); /* 1..32 bytes, copied */
        int phase = i / 2000;                      /* 0: small tensors, 1: 200 KiB ones, 2: copied runs */
        if (phase == 0) len = (size_t[]){WS_IOV_MIN, 3000, WS_IOV_MIN - 1, 5000}[i % 4];
        else if (phase == 1) len = i % 40 ? 700 : 200u << 10;
        else len = 2000;
        int ref = phase != 2;
        /* every third piece continues the one before it in memory (the list merges them) */
        if (i % 3 || from + hdr + len > cap) from = (size_t)(next >> 20) % (cap - len - hdr);
        CHECK_OK(ws_append(w, src + from, hdr, 0));
        memcpy(want + n, src + from, hdr), n += hdr, from += hdr;
        CHECK_OK(ws_append(w, src + from, len, ref));
        memcpy(want + n, src + from, len), n += len, from += len;
        copied += hdr + (!ref || direct || len < WS_IOV_MIN ? len : 0);
        if (ws_pos(w) != n) break;
    }
    CHECK(i == 6000 && ws_pos(w) == n);
    CHECK(ws_copied(w) == copied);
    CHECK_OK(ws_close(w));
    CHECK(file_is(path, want, n));
    free(want);
    free(src);
}

TEST(wstream_buffered_small_pieces_go_by_reference_in_batches) { check_small_pieces(0); }
TEST(wstream_direct_small_pieces_are_copied) { check_small_pieces(1); }

/* A test hook that makes every write of the writer thread slow (1 ms) and counts them in *ctx (only
 * the writer thread writes). */
static int slow_writes(void *ctx, io_kind kind, const char *path) {
    (void)path;
    if (kind != IO_PWRITE) return 0;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    ++*(size_t *)ctx;
    return 0;
}

/* Headers copied between large pieces by reference, as a save of big tensors appends them, with a
 * slow writer: a staging buffer takes batch after batch (each handed over when a large piece comes),
 * so the caller never waits for the writer to give one back, where it used to wait at every other
 * piece; each large piece goes in one write with the headers before it; with small buffers they roll
 * over, and the file is byte-exact either way. */
static void check_headers_between_large_pieces(int direct, uint64_t stage, int expect_no_wait) {
    char path[4096];
    snprintf(path, sizeof path, "%s/hdrs%d.bin", th_tmpdir(), direct);
    size_t piece = 256u << 10, items = 40, cap = items * (piece + 8192);
    uint8_t *src = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *want = malloc(cap);
    REQUIRE(src != MAP_FAILED && want);
    th_fill(src, cap, 31 + (uint64_t)direct);
    size_t writes = 0;
    io_hook_set(slow_writes, &writes);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){stage, 2, direct, 0, NULL}));
    size_t n = 0;
    for (size_t i = 0; i < items; i++) {
        /* a header that pads the file to the next page, so the piece goes by reference in both modes */
        size_t hdr = WS_ALIGN - n % WS_ALIGN + (i % 3 ? 0 : WS_ALIGN), from = i * (piece + 8192);
        CHECK_OK(ws_append(w, src + from, hdr, 0));
        memcpy(want + n, src + from, hdr), n += hdr;
        CHECK_OK(ws_append(w, src + from + 4096, piece, 1));
        memcpy(want + n, src + from + 4096, piece), n += piece;
    }
    CHECK_OK(ws_append(w, src, 100, 0)); /* an unaligned tail */
    memcpy(want + n, src, 100), n += 100;
    if (expect_no_wait) CHECK(ws_waits(w) == 0);
    CHECK_OK(ws_close(w));
    io_hook_set(NULL, NULL);
    if (expect_no_wait) CHECK(writes == items + 1); /* header + piece each, then the tail */
    CHECK(file_is(path, want, n));
    free(want);
    munmap(src, cap);
}

TEST(wstream_buffered_headers_between_large_pieces_share_a_buffer) { check_headers_between_large_pieces(0, 1 << 20, 1); }
TEST(wstream_direct_headers_between_large_pieces_share_a_buffer) { check_headers_between_large_pieces(1, 1 << 20, 1); }
TEST(wstream_direct_headers_roll_over_small_buffers) { check_headers_between_large_pieces(1, 16 << 10, 0); }

/* More large pieces than one staging buffer's list of pieces holds (each takes a piece of its own and
 * starts a new one for the headers after it): the buffer is left when its list is full, and the file
 * is byte-exact.  Every piece is the same memory, every header its index. */
static void check_many_large_pieces(int direct) {
    char path[4096];
    snprintf(path, sizeof path, "%s/many%d.bin", th_tmpdir(), direct);
    size_t piece = WS_REF_MIN, items = 600, hdr = WS_ALIGN;
    uint8_t *src = mmap(NULL, piece + items * hdr, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(src != MAP_FAILED);
    th_fill(src, piece, 77 + (uint64_t)direct);
    for (size_t i = 0; i < items; i++) memset(src + piece + i * hdr, (int)(i % 251), hdr);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){0, 2, direct, 0, NULL}));
    for (size_t i = 0; i < items; i++) {
        CHECK_OK(ws_append(w, src + piece + i * hdr, hdr, 0));
        CHECK_OK(ws_append(w, src, piece, 1));
    }
    CHECK_OK(ws_close(w));
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    uint8_t *got = malloc(piece);
    REQUIRE(got);
    size_t bad = 0;
    for (size_t i = 0; i < items; i++) {
        if (fread(got, 1, hdr, f) != hdr || memcmp(got, src + piece + i * hdr, hdr)) bad++;
        if (fread(got, 1, piece, f) != piece || memcmp(got, src, piece)) bad++;
    }
    CHECK(bad == 0 && fgetc(f) == EOF);
    fclose(f);
    free(got);
    munmap(src, piece + items * hdr);
    remove(path);
}

TEST(wstream_buffered_more_large_pieces_than_a_list_holds) { check_many_large_pieces(0); }
TEST(wstream_direct_more_large_pieces_than_a_list_holds) { check_many_large_pieces(1); }

TEST(wstream_open_error_names_path) {
    const char *dir = th_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/no/such/dir/f.bin", dir);
    wstream *w = NULL;
    CHECK_ERR(ws_open(&w, path, NULL), SCK_ERR_IO, "cannot create");
    CHECK(strstr(sck_last_error(), "no/such/dir/f.bin") != NULL);
    CHECK(w == NULL);
}

/* A write failing in the writer thread (file size limit: EFBIG) comes back from a later append or
 * from ws_close, with the path and offset in the message. */
TEST(wstream_writer_error_reaches_caller) {
    const char *dir = th_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/limited.bin", dir);
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 1 << 20;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    size_t n = 4 << 20;
    uint8_t *src = calloc(1, n);
    wstream *w = NULL;
    int rc = src ? ws_open(&w, path, &(ws_opts){256 << 10, 2, 0, 1, NULL}) : SCK_ERR_NOMEM;
    for (int i = 0; i < 4 && rc == SCK_OK; i++) rc = ws_append(w, src, n, i % 2);
    if (w && rc == SCK_OK) {
        int rc1 = ws_close_start(w); /* may already know of the error */
        rc = ws_close(w);
        CHECK(rc1 == SCK_OK || rc1 == rc);
    } else if (w) {
        int rc2 = ws_close(w); /* the same sticky error, and everything released */
        CHECK(rc2 == rc);
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    free(src);
    CHECK(rc == SCK_ERR_IO);
    CHECK(strstr(sck_last_error(), "limited.bin: write of") != NULL);
    CHECK(strstr(sck_last_error(), "File too large") != NULL);
}

/* Counts truncations and O_DIRECT switches (ctx: long[IO_NKINDS], the writer thread only) and, when
 * ctx[IO_NKINDS] is set, fails every switch with EINVAL. */
static int count_end_calls(void *ctx, io_kind kind, const char *path) {
    (void)path;
    long *n = ctx;
    n[kind]++;
    return kind == IO_SETFL && n[IO_NKINDS] ? EINVAL : 0;
}

/* With O_DIRECT the file's unaligned end is written through the page cache, so the file needs no
 * truncation (a journal transaction of its own on ext4); where O_DIRECT cannot be switched off, the
 * padded block is written and the file truncated; an aligned end needs neither.  Byte-exact each way. */
static void check_direct_end(size_t tail, int fail_setfl) {
    char path[4096];
    snprintf(path, sizeof path, "%s/end%zu_%d.bin", th_tmpdir(), tail, fail_setfl);
    size_t big = 1 << 20, n = big + 3 * WS_ALIGN + tail;
    uint8_t *src = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(src != MAP_FAILED);
    th_fill(src, n, 61 + tail);
    long calls[IO_NKINDS + 1] = {0};
    calls[IO_NKINDS] = fail_setfl;
    io_hook_set(count_end_calls, calls);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){256 << 10, 2, 1, 1, NULL}));
    CHECK(ws_is_direct(w));
    CHECK_OK(ws_append(w, src, big, 1));                      /* by reference */
    CHECK_OK(ws_append(w, src + big, 3 * WS_ALIGN + tail, 0)); /* staged, the end */
    CHECK_OK(ws_close(w));
    io_hook_set(NULL, NULL);
    CHECK(calls[IO_SETFL] == (tail != 0));
    CHECK(calls[IO_TRUNCATE] == (tail && fail_setfl));
    CHECK(file_is(path, src, n));
    munmap(src, n);
}

TEST(wstream_direct_unaligned_end_needs_no_truncation) {
    check_direct_end(100, 0);
    check_direct_end(WS_ALIGN - 1, 0);
    check_direct_end(0, 0);
}
TEST(wstream_direct_end_padded_and_truncated_where_o_direct_stays) {
    check_direct_end(100, 1);
    check_direct_end(0, 1);
}

TEST(wstream_abort_releases_without_flushing) {
    const char *dir = th_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/aborted.bin", dir);
    uint8_t small[100] = {1, 2, 3};
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, NULL));
    CHECK_OK(ws_append(w, small, sizeof small, 0));
    ws_abort(w);
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    CHECK(sb.st_size == 0); /* the staged bytes were dropped */
}

/* Constant memory (zip padding) goes by reference where the mode allows it and is copied where not:
 * headers that end on a page, then a page-aligned constant, then a large piece, over and over, copy
 * only the headers; an unaligned constant (O_DIRECT) or a short one (buffered) is copied; the file is
 * byte-exact either way. */
static void check_const_pieces(int direct) {
    char path[4096];
    snprintf(path, sizeof path, "%s/const%d.bin", th_tmpdir(), direct);
    static _Alignas(WS_ALIGN) const uint8_t pad[3 * WS_ALIGN] = {'Z', 'Z', 'Z', [3 * WS_ALIGN - 1] = 'Z'};
    size_t piece = WS_REF_MIN, items = 6, cap = items * (piece + 3 * WS_ALIGN) + 2 * WS_ALIGN;
    uint8_t *src = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *want = malloc(cap);
    REQUIRE(src != MAP_FAILED && want);
    th_fill(src, cap, 41 + (uint64_t)direct);
    wstream *w = NULL;
    REQUIRE_OK(ws_open(&w, path, &(ws_opts){1 << 20, 2, direct, 1, NULL}));
    size_t n = 0, copied = 0;
    for (size_t i = 0; i < items; i++) {
        size_t hdr = WS_ALIGN - n % WS_ALIGN, npad = (1 + i % 3) * WS_ALIGN, from = i * piece;
        CHECK_OK(ws_append(w, src + from, hdr, 0));
        memcpy(want + n, src + from, hdr), n += hdr, copied += hdr;
        CHECK_OK(ws_append_const(w, pad, npad));
        memcpy(want + n, pad, npad), n += npad;
        CHECK_OK(ws_append(w, src + from, piece, 1));
        memcpy(want + n, src + from, piece), n += piece;
    }
    CHECK(ws_copied(w) == copied); /* only the headers */
    /* with O_DIRECT: off the page (file and memory); buffered: shorter than a batch takes by reference */
    CHECK_OK(ws_append_const(w, pad + 1, 100));
    memcpy(want + n, pad + 1, 100), n += 100, copied += 100;
    CHECK_OK(ws_append_const(w, pad, WS_ALIGN));
    memcpy(want + n, pad, WS_ALIGN), n += WS_ALIGN, copied += direct ? WS_ALIGN : 0;
    CHECK(ws_copied(w) == copied);
    CHECK(ws_pos(w) == n);
    CHECK_OK(ws_close(w));
    CHECK(file_is(path, want, n));
    free(want);
    munmap(src, cap);
}

TEST(wstream_buffered_constant_pieces_go_by_reference) { check_const_pieces(0); }
TEST(wstream_direct_aligned_constant_pieces_go_by_reference) { check_const_pieces(1); }

/* A pool keeps the staging buffers from one stream to the next (an async handle's saves): the second
 * stream writes through the same memory, and a stream with another staging size replaces them. */
TEST(wstream_pool_reuses_staging_buffers) {
    char path[4096];
    snprintf(path, sizeof path, "%s/pool.bin", th_tmpdir());
    size_t n = 3 << 20;
    uint8_t *src = malloc(n);
    REQUIRE(src);
    th_fill(src, n, 5);
    ws_pool pool;
    memset(&pool, 0, sizeof pool);
    uint8_t *first[2] = {NULL, NULL};
    for (int round = 0; round < 3; round++) {
        uint64_t stage = round < 2 ? 1u << 20 : 2u << 20;
        ws_opts o = {stage, 2, 0, 0, &pool};
        wstream *w = NULL;
        REQUIRE_OK(ws_open(&w, path, &o));
        for (size_t k = 0; k < n; k += 4096) CHECK_OK(ws_append(w, src + k, 4096, 0)); /* all staged */
        CHECK_OK(ws_close(w));
        CHECK(file_is(path, src, n));
        /* buffer 0 is taken first; buffer 1 only if the writer still held 0 when the next was needed */
        CHECK(pool.size == stage && pool.buf[0]);
        if (round == 0) first[0] = pool.buf[0], first[1] = pool.buf[1];
        if (round == 1) CHECK(pool.buf[0] == first[0] && (!first[1] || pool.buf[1] == first[1]));
    }
    ws_pool_free(&pool);
    CHECK(pool.buf[0] == NULL && pool.buf[1] == NULL);
    free(src);
}
