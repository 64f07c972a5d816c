/* test_api.c - the public API's own contract: sck_version() matches the header's version macros, and every
 * function taking an option struct refuses a nonzero `reserved` entry, naming it, before doing anything. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

TEST(api_version_matches_header) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SCK_VERSION_MAJOR, SCK_VERSION_MINOR, SCK_VERSION_PATCH);
    REQUIRE(sck_version() != NULL);
    CHECK(strcmp(sck_version(), want) == 0);
    CHECK(strcmp(SCK_VERSION_STRING, want) == 0);
}

/* A valid one-tensor state, so that a reserved entry is the only thing wrong with a call. */
static float g_w[4] = {1, 2, 3, 4};
static sck_state *small_state(float *data) {
    int64_t shape[1] = {4}, off[1] = {0};
    sck_state *st = sck_state_new();
    if (st && sck_state_add_box(st, "w", SCK_F32, 1, shape, off, shape, data)) {
        sck_state_free(st);
        return NULL;
    }
    return st;
}

/* The function under test and its arguments. */
typedef enum { CALL_SAVE, CALL_SAVE_ASYNC, CALL_LOAD, CALL_SAVE_FULL } api_fn;
typedef struct api_call {
    api_fn fn;
    const char *dir;
    sck_state *st;
    sck_async *a;
} api_call;
#define NRES(type) (sizeof ((type *)0)->reserved / sizeof(unsigned))
#define SET_RESERVED(o, i) do { memset(&(o), 0, sizeof(o)); \
        if ((i) < sizeof (o).reserved / sizeof (o).reserved[0]) (o).reserved[i] = 9; } while (0)

/* One call with options whose reserved[i] is 9 (none set when i is past the end), the rest zero. */
static int call_with(const api_call *c, size_t i) {
    sck_save_opts so;
    sck_load_opts lo;
    sck_full_opts fo;
    SET_RESERVED(so, i);
    SET_RESERVED(lo, i);
    SET_RESERVED(fo, i);
    switch (c->fn) {
    case CALL_SAVE: return sck_save(NULL, c->dir, c->st, &so);
    case CALL_SAVE_ASYNC: {
        int rc = sck_save_async(c->a, NULL, c->dir, c->st, &so);
        return rc ? rc : sck_wait(c->a);
    }
    case CALL_LOAD: return sck_load(NULL, c->dir, c->st, &lo);
    case CALL_SAVE_FULL: return sck_save_full(NULL, c->dir, c->st, &fo);
    }
    return SCK_ERR_INVALID_ARG;
}

/* Every reserved entry in turn is refused with a message naming it ("sck_load: sck_load_opts.reserved[2]
 * is 9, must be 0"), and nothing reaches `c->dir`; then the same call with all of them 0 succeeds. */
static void check_each_reserved(api_call c_in, const char *fn,
                                const char *structname, size_t n) {
    const api_call *c = &c_in;
    int existed = access(c->dir, F_OK) == 0;
    for (size_t i = 0; i < n; i++) {
        char want[128];
        snprintf(want, sizeof want, "%s: %s.reserved[%zu] is 9, must be 0", fn, structname, i);
        int rc = call_with(c, i);
        if (rc != SCK_ERR_INVALID_ARG || !strstr(sck_last_error(), want)) {
            fprintf(stderr, "  %s returned %d, message: %s (expected %s)\n", fn, rc, sck_last_error(), want);
            th_fail(__FILE__, __LINE__, "nonzero reserved entry not refused by name");
        }
    }
    CHECK((access(c->dir, F_OK) == 0) == existed); /* refused before anything was written */
    CHECK_OK(call_with(c, n));
}

TEST(api_save_and_save_async_reject_nonzero_reserved) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", th_tmpdir());
    api_call c = {CALL_SAVE_ASYNC, dir, small_state(g_w), sck_async_new()};
    REQUIRE(c.st && c.a);
    check_each_reserved(c, "sck_save_async", "sck_save_opts", NRES(sck_save_opts));
    c.fn = CALL_SAVE;
    check_each_reserved(c, "sck_save", "sck_save_opts", NRES(sck_save_opts));
    sck_async_free(c.a);
    sck_state_free(c.st);
}

TEST(api_load_rejects_nonzero_reserved) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", th_tmpdir());
    sck_state *st = small_state(g_w);
    REQUIRE(st);
    REQUIRE_OK(sck_save(NULL, dir, st, NULL));
    sck_state_free(st);
    float back[4] = {0};
    api_call c = {CALL_LOAD, dir, small_state(back), NULL};
    REQUIRE(c.st);
    check_each_reserved(c, "sck_load", "sck_load_opts", NRES(sck_load_opts));
    CHECK(memcmp(back, g_w, sizeof back) == 0);
    sck_state_free(c.st);
}

TEST(api_save_full_rejects_nonzero_reserved) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", th_tmpdir());
    api_call c = {CALL_SAVE_FULL, path, small_state(g_w), NULL};
    REQUIRE(c.st);
    check_each_reserved(c, "sck_save_full", "sck_full_opts", NRES(sck_full_opts));
    sck_state_free(c.st);
}
