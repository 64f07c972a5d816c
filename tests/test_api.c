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

/* "sck_save_opts.reserved[3] is 9, must be 0" for entry i */
static void expect_reserved_msg(const char *structname, size_t i) {
    char want[96];
    snprintf(want, sizeof want, "%s.reserved[%zu] is 9, must be 0", structname, i);
    if (!strstr(sck_last_error(), want)) {
        fprintf(stderr, "  message was: %s (expected %s)\n", sck_last_error(), want);
        th_fail(__FILE__, __LINE__, "reserved message");
    }
}

TEST(api_save_and_save_async_reject_nonzero_reserved) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", th_tmpdir());
    sck_state *st = small_state(g_w);
    sck_async *a = sck_async_new();
    REQUIRE(st && a);
    for (size_t i = 0; i < sizeof ((sck_save_opts *)0)->reserved / sizeof(unsigned); i++) {
        sck_save_opts o;
        memset(&o, 0, sizeof o);
        o.reserved[i] = 9;
        CHECK_ERR(sck_save(NULL, dir, st, &o), SCK_ERR_INVALID_ARG, "sck_save: ");
        expect_reserved_msg("sck_save_opts", i);
        CHECK_ERR(sck_save_async(a, NULL, dir, st, &o), SCK_ERR_INVALID_ARG, "sck_save_async: ");
        expect_reserved_msg("sck_save_opts", i);
        CHECK(access(dir, F_OK) != 0); /* refused before anything was written */
    }
    CHECK_OK(sck_wait(a)); /* nothing pending */
    sck_save_opts zero;
    memset(&zero, 0, sizeof zero);
    CHECK_OK(sck_save(NULL, dir, st, &zero));
    sck_async_free(a);
    sck_state_free(st);
}

TEST(api_load_rejects_nonzero_reserved) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", th_tmpdir());
    sck_state *st = small_state(g_w);
    REQUIRE(st);
    REQUIRE_OK(sck_save(NULL, dir, st, NULL));
    sck_state_free(st);
    float back[4] = {0};
    st = small_state(back);
    REQUIRE(st);
    for (size_t i = 0; i < sizeof ((sck_load_opts *)0)->reserved / sizeof(unsigned); i++) {
        sck_load_opts o;
        memset(&o, 0, sizeof o);
        o.reserved[i] = 9;
        CHECK_ERR(sck_load(NULL, dir, st, &o), SCK_ERR_INVALID_ARG, "sck_load: ");
        expect_reserved_msg("sck_load_opts", i);
        CHECK(back[0] == 0);
    }
    sck_load_opts zero;
    memset(&zero, 0, sizeof zero);
    CHECK_OK(sck_load(NULL, dir, st, &zero));
    CHECK(memcmp(back, g_w, sizeof back) == 0);
    sck_state_free(st);
}

TEST(api_save_full_rejects_nonzero_reserved) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", th_tmpdir());
    sck_state *st = small_state(g_w);
    REQUIRE(st);
    for (size_t i = 0; i < sizeof ((sck_full_opts *)0)->reserved / sizeof(unsigned); i++) {
        sck_full_opts o;
        memset(&o, 0, sizeof o);
        o.reserved[i] = 9;
        CHECK_ERR(sck_save_full(NULL, path, st, &o), SCK_ERR_INVALID_ARG, "sck_save_full: ");
        expect_reserved_msg("sck_full_opts", i);
        CHECK(access(path, F_OK) != 0);
    }
    sck_full_opts zero;
    memset(&zero, 0, sizeof zero);
    CHECK_OK(sck_save_full(NULL, path, st, &zero));
    sck_state_free(st);
}
