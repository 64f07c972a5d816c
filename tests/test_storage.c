/* test_storage.c - the storage table (src/io/storage.h) is the one way to the files: a table that
 * wraps POSIX and counts sees every open, read and write of a save and a resharded load, and a table
 * whose reads fail makes the load fail cleanly on every rank, naming the file. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "io/storage.h"

typedef struct counting {
    const io_storage *under;
    long opens, closes, fstats, stats, preads, pwrites, fsyncs, renames, mkdirs, unlinks;
    unsigned long long read_bytes, written_bytes;
    int fail_reads;             /* preadv fails with EIO */
} counting;

#define UNDER(c) (((counting *)(c))->under)
#define BUMP(c, f) __atomic_add_fetch(&((counting *)(c))->f, 1, __ATOMIC_SEQ_CST)

static int c_open(void *c, const char *p, int fl, mode_t m) { BUMP(c, opens); return UNDER(c)->open(UNDER(c)->ctx, p, fl, m); }
static int c_close(void *c, int fd, const char *p) { BUMP(c, closes); return UNDER(c)->close(UNDER(c)->ctx, fd, p); }
static int c_fstat(void *c, int fd, struct stat *sb, const char *p) { BUMP(c, fstats); return UNDER(c)->fstat(UNDER(c)->ctx, fd, sb, p); }
static int c_stat(void *c, const char *p, struct stat *sb) { BUMP(c, stats); return UNDER(c)->stat(UNDER(c)->ctx, p, sb); }
static int c_lstat(void *c, const char *p, struct stat *sb) { BUMP(c, stats); return UNDER(c)->lstat(UNDER(c)->ctx, p, sb); }
static ssize_t c_preadv(void *c, int fd, const struct iovec *iov, int n, uint64_t off, const char *p) {
    BUMP(c, preads);
    if (((counting *)c)->fail_reads) {
        errno = EIO;
        return -1;
    }
    ssize_t r = UNDER(c)->preadv(UNDER(c)->ctx, fd, iov, n, off, p);
    if (r > 0) __atomic_add_fetch(&((counting *)c)->read_bytes, (unsigned long long)r, __ATOMIC_SEQ_CST);
    return r;
}
static ssize_t c_pwritev(void *c, int fd, const struct iovec *iov, int n, uint64_t off, const char *p) {
    BUMP(c, pwrites);
    ssize_t r = UNDER(c)->pwritev(UNDER(c)->ctx, fd, iov, n, off, p);
    if (r > 0) __atomic_add_fetch(&((counting *)c)->written_bytes, (unsigned long long)r, __ATOMIC_SEQ_CST);
    return r;
}
static int c_fsync(void *c, int fd, const char *p) { BUMP(c, fsyncs); return UNDER(c)->fsync(UNDER(c)->ctx, fd, p); }
static int c_ftruncate(void *c, int fd, uint64_t n, const char *p) { return UNDER(c)->ftruncate(UNDER(c)->ctx, fd, n, p); }
static int c_setfl(void *c, int fd, int fl, const char *p) { return UNDER(c)->setfl(UNDER(c)->ctx, fd, fl, p); }
static int c_rename(void *c, const char *a, const char *b) { BUMP(c, renames); return UNDER(c)->rename(UNDER(c)->ctx, a, b); }
static int c_exchange(void *c, const char *a, const char *b) { BUMP(c, renames); return UNDER(c)->exchange(UNDER(c)->ctx, a, b); }
static int c_mkdir(void *c, const char *p, mode_t m) { BUMP(c, mkdirs); return UNDER(c)->mkdir(UNDER(c)->ctx, p, m); }
static int c_unlink(void *c, const char *p) { BUMP(c, unlinks); return UNDER(c)->unlink(UNDER(c)->ctx, p); }
static int c_rmdir(void *c, const char *p) { return UNDER(c)->rmdir(UNDER(c)->ctx, p); }
static int c_flock(void *c, int fd, int op, const char *p) { return UNDER(c)->flock(UNDER(c)->ctx, fd, op, p); }

static io_storage counting_table(counting *c) {
    memset(c, 0, sizeof *c);
    c->under = io_storage_posix();
    io_storage t = {c, c_open, c_close, c_fstat, c_stat, c_lstat, c_preadv, c_pwritev, c_fsync, c_ftruncate, c_setfl,
                    c_rename, c_exchange, c_mkdir, c_unlink, c_rmdir, c_flock};
    return t;
}

TEST(storage_table_sees_every_file_call_of_save_and_load) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    counting c;
    io_storage t = counting_table(&c);
    io_storage_set(&t);
    int rc = fx_save(dir, 3, 1, 0, NULL, NULL);
    counting saved = c;
    int lrc = rc ? rc : fx_load_resharded(dir, 2, 0);
    io_storage_set(NULL);
    CHECK(io_storage_current() == io_storage_posix());
    REQUIRE_OK(rc);
    REQUIRE_OK(lrc);
    /* the save: a data file per rank, .metadata (and its side file), the temporary directory, the swap */
    CHECK(saved.opens >= 4 && saved.pwrites >= 4 && saved.fsyncs >= 4 && saved.mkdirs >= 1 && saved.renames >= 1);
    CHECK(saved.written_bytes > 0 && saved.preads == 0);
    /* the load read back at least what the save wrote of its data files, all through the table */
    CHECK(c.preads > 0 && c.read_bytes > 0 && c.opens > saved.opens && c.closes >= c.opens - 1);
    CHECK(c.stats > saved.stats && c.fstats > 0);
}

TEST(storage_table_read_errors_fail_the_load_cleanly) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 2, 1, 0, NULL, NULL));
    int fds = fx_count_fds();
    counting c;
    io_storage t = counting_table(&c);
    c.fail_reads = 1;
    io_storage_set(&t);
    int rc = fx_load_resharded(dir, 3, 0);
    io_storage_set(NULL);
    CHECK(rc == SCK_ERR_IO);
    CHECK(strstr(sck_last_error(), dir) != NULL && strstr(sck_last_error(), "read") != NULL);
    CHECK(fx_count_fds() == fds);
    CHECK_OK(fx_load_resharded(dir, 3, 0)); /* the POSIX table again: the checkpoint is fine */
}
