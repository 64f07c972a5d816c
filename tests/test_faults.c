/* test_faults.c - fault injection: every file-system call of a 3-rank save is failed in turn (EIO or
 * ENOSPC, through the hook of src/io/io_hook.h).  Each time: all ranks return the same error, nothing
 * hangs, no fd or temporary directory leaks, and the old checkpoint still loads bit-exact.  Runs with
 * the atomic exchange and with the two-rename fallback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "io/io_hook.h"

#define RANKS 3

typedef struct fault {
    long count[IO_NKINDS];  /* calls seen per kind (atomic adds: ranks are threads) */
    int kind;               /* kind to fail, or -1 */
    long nth;               /* 1-based call of that kind */
    int err;
    int fired;
    int no_exchange;        /* every RENAME_EXCHANGE fails with EINVAL: the fallback path */
} fault;

static int fault_hook(void *ctx, io_kind kind, const char *path) {
    (void)path;
    fault *f = ctx;
    long n = __atomic_add_fetch(&f->count[kind], 1, __ATOMIC_SEQ_CST);
    if ((int)kind == f->kind && n == f->nth) {
        __atomic_store_n(&f->fired, 1, __ATOMIC_SEQ_CST);
        return f->err;
    }
    if (kind == IO_EXCHANGE && f->no_exchange) return EINVAL;
    return 0;
}

/* Calls of each kind in one fault-free save of version 1 over version 0. */
static void count_calls(const char *dir, int no_exchange, long *counts) {
    fault f;
    memset(&f, 0, sizeof f);
    f.kind = -1;
    f.no_exchange = no_exchange;
    io_hook_set(fault_hook, &f);
    int rc = fx_save(dir, RANKS, 1, 0, NULL, NULL);
    io_hook_set(NULL, NULL);
    CHECK_OK(rc);
    memcpy(counts, f.count, sizeof f.count);
}

static void run_faults(int no_exchange) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, RANKS, 0, 0, NULL, NULL));
    long counts[IO_NKINDS];
    count_calls(dir, no_exchange, counts);
    REQUIRE(counts[IO_OPEN] >= 2 * RANKS && counts[IO_PWRITE] >= RANKS && counts[IO_FSYNC] >= RANKS + 2);
    REQUIRE(counts[IO_RENAME] + counts[IO_EXCHANGE] >= 1 && counts[IO_MKDIR] == 1 && counts[IO_UNLINK] >= RANKS + 1);
    int iterations = 0, failed_saves = 0;
    for (int kind = 0; kind < IO_NKINDS; kind++) {
        for (long nth = 1; nth <= counts[kind]; nth++) {
            /* Start from version 0 committed and nothing else around. */
            if (fx_load_version(dir, 0) != 0 || fx_count_siblings(dir) != 0) {
                REQUIRE_OK(fx_save(dir, RANKS, 0, 0, NULL, NULL));
                REQUIRE(fx_count_siblings(dir) == 0);
            }
            int fds = fx_count_fds();
            fault f;
            memset(&f, 0, sizeof f);
            f.kind = kind;
            f.nth = nth;
            f.err = nth % 2 ? EIO : ENOSPC;
            f.no_exchange = no_exchange;
            int rcs[RANKS];
            char msgs[RANKS][512];
            io_hook_set(fault_hook, &f);
            fx_save(dir, RANKS, 1, 0, rcs, msgs);
            io_hook_set(NULL, NULL);
            iterations++;
            /* The clean-up after the commit races: rank 0 empties the previous checkpoint's directory
             * while the other ranks each remove their own file of it (src/core/commit.c), so a run makes
             * one unlink more or less than the counting run when a rank finds its file gone. */
            int racy = (kind == IO_UNLINK || kind == IO_RMDIR) && f.count[kind] < nth;
            CHECK(f.fired || racy);
            for (int r = 1; r < RANKS; r++) {
                CHECK(rcs[r] == rcs[0]);
                CHECK(!strcmp(msgs[r], msgs[0]));
            }
            CHECK(fx_count_fds() == fds);
            if (rcs[0] != SCK_OK) {
                failed_saves++;
                /* The error names the failed call's errno and the old checkpoint is untouched. */
                if (rcs[0] != SCK_ERR_IO || !strstr(msgs[0], strerror(f.err)) || fx_load_version(dir, 0) != 0 ||
                    fx_count_siblings(dir) != 0) {
                    fprintf(stderr, "  %s #%ld (%s): status %d: %s; loads as %d; %d leftovers\n", io_kind_name((io_kind)kind), nth,
                            no_exchange ? "fallback" : "exchange", rcs[0], msgs[0], fx_load_version(dir, 0), fx_count_siblings(dir));
                    CHECK(0);
                }
            } else {
                /* Only best-effort clean-up after the commit may fail without failing the save. */
                int v = fx_load_version(dir, 0);
                if (v != 1 || (kind != IO_UNLINK && kind != IO_RMDIR)) {
                    fprintf(stderr, "  %s #%ld (%s): save succeeded; loads as %d\n", io_kind_name((io_kind)kind), nth,
                            no_exchange ? "fallback" : "exchange", v);
                    CHECK(0);
                }
                /* Whatever it left goes at the next save. */
                REQUIRE_OK(fx_save(dir, RANKS, 0, 0, NULL, NULL));
                CHECK(fx_count_siblings(dir) == 0);
            }
        }
    }
    CHECK(iterations >= 25); /* 29 calls in all with the exchange, 31 with the fallback */
    CHECK(failed_saves >= iterations - counts[IO_UNLINK] - counts[IO_RMDIR]);
    CHECK(fx_load_version(dir, 0) == 0);
}

TEST(faults_every_io_call_of_a_3_rank_save_exchange) { run_faults(0); }

TEST(faults_every_io_call_of_a_3_rank_save_two_rename_fallback) { run_faults(1); }

/* A save over a checkpoint of more ranks removes all of it, right away: each rank its own file of it,
 * rank 0 the rest (commit_remove_own / commit_remove_prev), after the exchange and after the fallback's
 * two renames. */
static void overwrite_removes_previous(int no_exchange) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ow%d", th_tmpdir(), no_exchange);
    REQUIRE_OK(fx_save(dir, 5, 0, 0, NULL, NULL));
    long counts[IO_NKINDS];
    count_calls(dir, no_exchange, counts); /* version 1 on RANKS ranks */
    CHECK(counts[IO_EXCHANGE] == 1);
    CHECK(fx_count_siblings(dir) == 0);
    CHECK(fx_load_version(dir, 0) == 1);
    char p[4200];
    snprintf(p, sizeof p, "%s/__3_0.distcp", dir); /* the 5-rank save's files are gone, not merged */
    CHECK(access(p, F_OK) != 0);
}

TEST(faults_overwrite_removes_previous_checkpoint_exchange) { overwrite_removes_previous(0); }
TEST(faults_overwrite_removes_previous_checkpoint_two_rename_fallback) { overwrite_removes_previous(1); }

/* A failure in the very first save (no old checkpoint): nothing is left behind at all. */
TEST(faults_first_save_leaves_nothing) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    fault f;
    memset(&f, 0, sizeof f);
    f.kind = IO_FSYNC;
    f.nth = 2;
    f.err = ENOSPC;
    io_hook_set(fault_hook, &f);
    int rc = fx_save(dir, RANKS, 1, 0, NULL, NULL);
    io_hook_set(NULL, NULL);
    CHECK(rc == SCK_ERR_IO);
    CHECK(strstr(sck_last_error(), "No space left on device") != NULL);
    CHECK(fx_count_siblings(dir) == 0);
    CHECK(fx_load_version(dir, 0) == -1);
    CHECK(strstr(sck_last_error(), "cannot open checkpoint") != NULL);
}

/* ---- the commit protocol's edges ---- */

TEST(commit_refuses_to_replace_a_directory_holding_other_files) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE(mkdir(dir, 0755) == 0);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    REQUIRE(fx_write(p, "keep me", 7) == 0);
    CHECK_ERR(fx_save(dir, 2, 0, 0, NULL, NULL), SCK_ERR_INVALID_ARG, "holds 'notes.txt', which is not part of a checkpoint");
    CHECK(access(p, F_OK) == 0);
    CHECK(fx_count_siblings(dir) == 0);
    /* an empty directory, or an earlier checkpoint, is replaced */
    REQUIRE(unlink(p) == 0);
    CHECK_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    CHECK_OK(fx_save(dir, 3, 1, 0, NULL, NULL));
    CHECK(fx_load_version(dir, 0) == 1);
    snprintf(p, sizeof p, "%s/__2_0.distcp", dir);
    CHECK(access(p, F_OK) == 0);
    CHECK_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    CHECK(access(p, F_OK) != 0); /* no stale file of the 3-rank save */
}

TEST(commit_through_a_symlink_replaces_the_target_and_keeps_the_link) {
    char target[4096], link[4096];
    snprintf(target, sizeof target, "%s/real", th_tmpdir());
    snprintf(link, sizeof link, "%s/ck", th_tmpdir());
    REQUIRE(mkdir(target, 0755) == 0);
    REQUIRE(symlink(target, link) == 0);
    REQUIRE_OK(fx_save(link, 2, 0, 0, NULL, NULL));
    REQUIRE_OK(fx_save(link, 2, 1, 0, NULL, NULL));
    struct stat sb;
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(fx_load_version(link, 0) == 1);
    CHECK(fx_load_version(target, 0) == 1);
    CHECK(fx_count_siblings(target) == 0);
}

TEST(commit_next_save_removes_leftovers_but_not_lookalikes) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    const char *names[] = {"ck.tmp-0123456789abcdef", "ck.old-fedcba9876543210", "ck.tmp-mine", "ck.old-0123"};
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/%s", th_tmpdir(), names[k]);
        REQUIRE(mkdir(p, 0755) == 0);
        snprintf(p, sizeof p, "%s/%s/__0_0.distcp", th_tmpdir(), names[k]);
        REQUIRE(fx_write(p, "x", 1) == 0);
    }
    CHECK_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/%s", th_tmpdir(), names[k]);
        CHECK((access(p, F_OK) == 0) == (k >= 2)); /* only names with a 16-hex-digit id are ours */
    }
    CHECK(fx_load_version(dir, 0) == 0);
}

TEST(commit_interrupted_fallback_swap_reads_and_recovers) {
    /* The state a crash between the fallback's two renames leaves: dir missing, dir.old-<id> old. */
    char dir[4096], old[4200], tmp[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    snprintf(old, sizeof old, "%s.old-00000000000000aa", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp-00000000000000aa", dir);
    char other[4200];
    snprintf(other, sizeof other, "%s/other", th_tmpdir());
    REQUIRE_OK(fx_save(dir, 2, 0, 0, NULL, NULL));
    REQUIRE_OK(fx_save(other, 2, 1, 0, NULL, NULL));
    REQUIRE(rename(dir, old) == 0);               /* the old one */
    REQUIRE(rename(other, tmp) == 0);             /* the new one, complete */
    CHECK(fx_load_version(dir, 0) == 1);          /* readers take the complete new one */
    char meta[4300];
    snprintf(meta, sizeof meta, "%s/.metadata", tmp);
    REQUIRE(unlink(meta) == 0);                   /* now the new one is incomplete */
    CHECK(fx_load_version(dir, 0) == 0);          /* readers fall back to the old one */
    CHECK_OK(fx_save(dir, 2, 1, 0, NULL, NULL));  /* the next save restores dir, then replaces it */
    CHECK(fx_load_version(dir, 0) == 1);
    CHECK(fx_count_siblings(dir) == 0);
}
