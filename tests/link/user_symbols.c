/* user_symbols.c - a trainer that defines functions named like the library's internals (write_file,
 * ensure_dir, fsync_dir, zip_find, io_open, plan_build, copy_parallel) with its own signatures and
 * behaviour, then saves, loads and verifies a checkpoint.  Linked against the sealed libshardckpt.a and
 * against libshardckpt.so (tests/link/run.sh): both must build, and the library must never call these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardckpt.h"

/* Each one records that it was called and fails, so a library reaching it breaks the save. */
static int user_calls;

int write_file(const char *path, const void *data, size_t n);
int ensure_dir(const char *path);
int fsync_dir(int fd);
int zip_find(void);
int io_open(double x);
int plan_build(const char *name);
int copy_parallel(void);

int write_file(const char *path, const void *data, size_t n) { (void)path; (void)data; (void)n; user_calls++; return -42; }
int ensure_dir(const char *path) { (void)path; user_calls++; return -42; }
int fsync_dir(int fd) { (void)fd; user_calls++; return -42; }
int zip_find(void) { user_calls++; return -42; }
int io_open(double x) { (void)x; user_calls++; return -42; }
int plan_build(const char *name) { (void)name; user_calls++; return -42; }
int copy_parallel(void) { user_calls++; return -42; }

static int fail(const char *what) {
    fprintf(stderr, "FAIL user_symbols: %s: %s\n", what, sck_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: user_symbols EMPTY_DIR\n");
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", argv[1]);

    float w[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    int64_t shape[2] = {2, 3}, off[2] = {0, 0};
    sck_comm *comm = sck_comm_single();
    sck_state *st = sck_state_new();
    if (!comm || !st) return fail("setup");
    if (sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, shape, w)) return fail("add_box");
    if (sck_state_add_value(st, "other.step", sck_value_int(7))) return fail("add_value");
    if (sck_save(comm, dir, st, NULL)) return fail("sck_save");
    sck_state_free(st);

    st = sck_state_new();
    if (!st || sck_state_add_box(st, "model.w", SCK_F32, 2, shape, off, shape, back) ||
        sck_state_add_value(st, "other.step", NULL))
        return fail("load setup");
    if (sck_load(comm, dir, st, NULL)) return fail("sck_load");
    if (memcmp(w, back, sizeof w) != 0) return fail("loaded tensor differs");
    if (sck_value_get_int(sck_state_value(st, "other.step")) != 7) return fail("loaded step differs");
    sck_state_free(st);

    sck_ckpt *ck = NULL;
    sck_verify_stats vs;
    if (sck_ckpt_open(dir, &ck) || sck_ckpt_verify(ck, &vs)) return fail("verify");
    sck_ckpt_close(ck);
    sck_comm_free(comm);
    if (user_calls) {
        fprintf(stderr, "FAIL user_symbols: the library called the program's own functions %d times\n", user_calls);
        return 1;
    }
    printf("ok user_symbols: saved, loaded and verified with the program's own write_file, plan_build, ...\n");
    return 0;
}
