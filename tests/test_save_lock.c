/* test_save_lock.c - one saver per checkpoint directory: two saves of one directory at once (two
 * groups of 16 or 64 thread ranks, and two processes), hundreds of rounds: each round one save wins,
 * the other fails with SCK_ERR_BUSY before writing anything, and the directory then loads whole as the
 * winner's checkpoint, with nothing left beside it; a load that races a replacement says so
 * (SCK_ERR_BUSY), never a checksum error.  A held lock is reported with its holder, and the
 * running save's temporary directory is left alone. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"

#define COLS 8
#define MAX_N 64

typedef struct saver {
    const char *dir;
    int n;              /* thread ranks */
    float v;            /* every element of this saver's checkpoint */
    int rc0;            /* rank 0's status */
    int bad;            /* a rank returned something other than rank 0's status */
    char msg[512];
} saver;

static int save_rank(sck_comm *comm, void *arg) {
    saver *s = arg;
    int r = sck_comm_rank(comm);
    float row[COLS];
    for (int i = 0; i < COLS; i++) row[i] = s->v;
    int64_t shape[2] = {s->n, COLS}, off[2] = {r, 0}, size[2] = {1, COLS};
    sck_state *st = sck_state_new();
    int rc = st ? sck_state_add_box(st, "w", SCK_F32, 2, shape, off, size, row) : SCK_ERR_NOMEM;
    if (!rc) rc = sck_state_add_value(st, "v", sck_value_float(s->v));
    if (!rc) rc = sck_save(comm, s->dir, st, NULL);
    if (r == 0) {
        s->rc0 = rc;
        snprintf(s->msg, sizeof s->msg, "%s", sck_last_error());
    }
    sck_state_free(st);
    return rc;
}

static void *run_saver(void *arg) {
    saver *s = arg;
    sck_threads_run(s->n, save_rank, s);
    return NULL;
}

/* The value every element of dir's checkpoint holds (NAN-free inputs), or -1 if it does not load
 * whole with one value for all of it. */
static int last_load_rc;

static float loaded_value(const char *dir, int n) {
    float *w = calloc((size_t)n * COLS, sizeof *w);
    sck_state *st = sck_state_new();
    int64_t shape[2] = {n, COLS}, off[2] = {0, 0};
    int rc = w && st ? sck_state_add_box(st, "w", SCK_F32, 2, shape, off, shape, w) : SCK_ERR_NOMEM;
    if (!rc) rc = sck_state_add_value(st, "v", NULL);
    sck_comm *c = sck_comm_single();
    if (!rc) rc = sck_load(c, dir, st, NULL);
    last_load_rc = rc;
    float v = -1;
    const sck_value *val = rc ? NULL : sck_state_value(st, "v");
    if (val) {
        v = (float)sck_value_get_float(val);
        for (int i = 0; i < n * COLS; i++)
            if (w[i] != v) v = -1;
    }
    sck_comm_free(c);
    sck_state_free(st);
    free(w);
    return v;
}

/* rounds of two concurrent saves of dir (values 2k+1 and 2k+2 in round k); returns the failures. */
static int race(const char *dir, int n, int rounds, float base, int *busy) {
    int failures = 0;
    for (int k = 0; k < rounds; k++) {
        saver a = {dir, n, base + 2 * (float)k + 1, 0, 0, ""}, b = {dir, n, base + 2 * (float)k + 2, 0, 0, ""};
        pthread_t ta, tb;
        if (pthread_create(&ta, NULL, run_saver, &a) != 0) return failures + 1;
        if (pthread_create(&tb, NULL, run_saver, &b) != 0) {
            pthread_join(ta, NULL);
            return failures + 1;
        }
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        float got = loaded_value(dir, n);
        int ok_a = a.rc0 == SCK_OK, ok_b = b.rc0 == SCK_OK;
        int clean = (ok_a || a.rc0 == SCK_ERR_BUSY) && (ok_b || b.rc0 == SCK_ERR_BUSY);
        /* the later OK save is what loads; with one OK, that one */
        int right = (ok_a && got == a.v) || (ok_b && got == b.v);
        if (!clean || !(ok_a || ok_b) || !right || fx_count_siblings(dir) != 0) {
            if (failures++ < 3)
                fprintf(stderr, "  round %d (%d ranks): A %s (%s), B %s (%s), loads as %g, %d leftovers\n", k, n,
                        sck_status_name(a.rc0), a.msg, sck_status_name(b.rc0), b.msg, (double)got, fx_count_siblings(dir));
        }
        if (a.rc0 == SCK_ERR_BUSY && !strstr(a.msg, ".lock")) failures++;
        *busy += (a.rc0 == SCK_ERR_BUSY) + (b.rc0 == SCK_ERR_BUSY);
    }
    return failures;
}

TEST(save_lock_two_thread_groups_race) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    int busy = 0;
    CHECK(race(dir, 16, 150, 0, &busy) == 0);
    CHECK(race(dir, 64, 40, 1000, &busy) == 0);
    fprintf(stderr, "  190 rounds: %d saves refused as busy\n", busy);
}

TEST(save_lock_two_processes_race) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) { /* the other process saves its own values, as often */
        int fails = 0;
        for (int k = 0; k < 120; k++) {
            saver s = {dir, 16, 50000 + (float)k, 0, 0, ""};
            run_saver(&s);
            if (s.rc0 != SCK_OK && s.rc0 != SCK_ERR_BUSY) fails++;
        }
        _exit(fails ? 1 : 0);
    }
    int fails = 0, busy = 0, raced = 0, saved_once = 0;
    for (int k = 0; k < 120; k++) {
        saver s = {dir, 16, 1 + (float)k, 0, 0, ""};
        run_saver(&s);
        if (s.rc0 != SCK_OK && s.rc0 != SCK_ERR_BUSY) {
            if (fails++ < 3) fprintf(stderr, "  round %d: %s: %s\n", k, sck_status_name(s.rc0), s.msg);
        }
        busy += s.rc0 == SCK_ERR_BUSY;
        /* a load racing the other process's replacement is told so (SCK_ERR_BUSY), never a checksum error */
        saved_once |= s.rc0 == SCK_OK; /* before, the directory may not exist yet */
        float got = saved_once ? loaded_value(dir, 16) : 0;
        raced += got < 0 && last_load_rc == SCK_ERR_BUSY;
        if (got < 0 && last_load_rc != SCK_ERR_BUSY && fails++ < 3)
            fprintf(stderr, "  round %d: the checkpoint does not load whole: %s\n", k, sck_last_error());
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(fails == 0);
    CHECK(loaded_value(dir, 16) > 0);
    CHECK(fx_count_siblings(dir) == 0);
    fprintf(stderr, "  2 x 120 saves from two processes: %d of this side's refused as busy, %d loads told of a replacement\n", busy,
            raced);
}

TEST(save_lock_names_holder_and_spares_its_temporary_directory) {
    char dir[4096], lockp[4200], live[4200];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    saver first = {dir, 2, 7, 0, 0, ""};
    run_saver(&first);
    REQUIRE_OK(first.rc0);
    /* another save "running": it holds the lock and writes into its temporary directory */
    snprintf(lockp, sizeof lockp, "%s.lock", dir);
    snprintf(live, sizeof live, "%s.tmp-0123456789abcdef", dir);
    int fd = open(lockp, O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(flock(fd, LOCK_EX | LOCK_NB) == 0);
    REQUIRE(write(fd, "pid 4242 on trainer-7 since 2026-01-01T00:00:00Z\n", 50) == 50);
    REQUIRE(mkdir(live, 0755) == 0);
    saver second = {dir, 3, 8, 0, 0, ""};
    run_saver(&second);
    CHECK(second.rc0 == SCK_ERR_BUSY);
    CHECK(strstr(second.msg, "pid 4242 on trainer-7") != NULL && strstr(second.msg, lockp) != NULL);
    if (second.rc0 != SCK_ERR_BUSY) fprintf(stderr, "  %s\n", second.msg);
    CHECK(access(live, F_OK) == 0); /* not taken for a crashed save's leftover */
    CHECK(loaded_value(dir, 2) == 7);
    close(fd);
    CHECK(rmdir(live) == 0);
    /* the lock released (a holder that died is the same): the next save goes through and cleans up */
    saver third = {dir, 3, 9, 0, 0, ""};
    run_saver(&third);
    CHECK_OK(third.rc0);
    CHECK(loaded_value(dir, 3) == 9);
    CHECK(access(lockp, F_OK) != 0 && fx_count_siblings(dir) == 0);
}
