/* test_crash.c - SIGKILL a saving process at many points, then check the checkpoint directory: it
 * must load as the old or the new checkpoint, bit-exact, never as something torn or not at all; the
 * next save must clean up whatever the dead one left.
 *
 * Points: before each file-system call of a 2-rank save (the child kills itself from the I/O hook,
 * with the atomic exchange and with the two-rename fallback), and at random times while a child
 * saves in a loop. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_fixture.h"
#include "harness.h"
#include "io/io_hook.h"

#define RANKS 2

typedef struct killer {
    long calls;
    long kill_at;       /* 1-based call to die before; 0: never */
    int no_exchange;
} killer;

static int kill_hook(void *ctx, io_kind kind, const char *path) {
    (void)path;
    killer *k = ctx;
    long n = __atomic_add_fetch(&k->calls, 1, __ATOMIC_SEQ_CST);
    if (n == k->kill_at) kill(getpid(), SIGKILL);
    if (kind == IO_EXCHANGE && k->no_exchange) return EINVAL;
    return 0;
}

/* Runs a child that saves version v over dir with the hook armed; returns 1 if it was killed, 0 if it
 * finished the save, -1 on anything else. */
static int child_save(const char *dir, int v, long kill_at, int no_exchange) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        static killer k;
        k.kill_at = kill_at;
        k.no_exchange = no_exchange;
        io_hook_set(kill_hook, &k);
        int rc = fx_save(dir, RANKS, v, 0, NULL, NULL);
        _exit(rc == SCK_OK ? 0 : 3);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return 1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    return -1;
}

/* After a crash: the directory is one whole version; a fresh save then cleans every leftover. */
static int check_and_repair(const char *dir, const char *what, long point) {
    int v = fx_load_version(dir, 0);
    if (v != 0 && v != 1) {
        fprintf(stderr, "  %s point %ld: loads as %d: %s\n", what, point, v, sck_last_error());
        return -1;
    }
    if (fx_load_resharded(dir, 3, 0) != SCK_OK) {
        fprintf(stderr, "  %s point %ld: resharded load failed: %s\n", what, point, sck_last_error());
        return -1;
    }
    if (fx_save(dir, RANKS, 0, 0, NULL, NULL) != SCK_OK || fx_count_siblings(dir) != 0 || fx_load_version(dir, 0) != 0) {
        fprintf(stderr, "  %s point %ld: repair save failed (%s) or left %d entries\n", what, point, sck_last_error(),
                fx_count_siblings(dir));
        return -1;
    }
    return v;
}

static void crash_every_call(int no_exchange) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, RANKS, 0, 0, NULL, NULL));
    int killed = 0, saw_old = 0, saw_new = 0;
    for (long at = 1; at < 200; at++) {
        int r = child_save(dir, 1, at, no_exchange);
        REQUIRE(r >= 0);
        int v = check_and_repair(dir, no_exchange ? "fallback" : "exchange", at);
        REQUIRE(v >= 0);
        if (r == 0) { /* the save finished before call `at`: every call has been a kill point */
            CHECK(v == 1);
            break;
        }
        killed++;
        saw_old += v == 0;
        saw_new += v == 1;
    }
    CHECK(killed >= 20); /* 24 calls with the exchange, 26 with the fallback */
    CHECK(saw_old > 0 && saw_new > 0); /* the points span the commit */
}

TEST(crash_sigkill_before_every_io_call_exchange) { crash_every_call(0); }

TEST(crash_sigkill_before_every_io_call_two_rename_fallback) { crash_every_call(1); }

TEST(crash_sigkill_at_random_times_during_repeated_saves) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ck", th_tmpdir());
    REQUIRE_OK(fx_save(dir, RANKS, 0, 0, NULL, NULL));
    srand(12345);
    for (int i = 0; i < 30; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            static killer k;
            k.no_exchange = i % 2; /* half of them take the fallback path */
            io_hook_set(kill_hook, &k);
            for (int v = 1;; v ^= 1)
                if (fx_save(dir, RANKS, v, 0, NULL, NULL) != SCK_OK) _exit(3);
        }
        usleep((useconds_t)(rand() % 20000));
        kill(pid, SIGKILL);
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        CHECK(check_and_repair(dir, "random", i) >= 0);
    }
}
