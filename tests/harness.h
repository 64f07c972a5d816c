/* harness.h - a tiny test runner: TEST(name) registers a test; CHECK records a failure and goes on,
 * REQUIRE records it and leaves the test.  The runner prints "N passed, N failed" last. */
#ifndef SCK_TEST_HARNESS_H
#define SCK_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "shardckpt.h"

typedef void (*th_fn)(void);
void th_register(const char *name, th_fn fn);
void th_fail(const char *file, int line, const char *what);
void th_fail_status(const char *file, int line, const char *what, int status);
/* A fresh empty directory for this test, removed after the run (unless SCK_KEEP_TMP is set).
 * Returns a path valid until the test ends. */
const char *th_tmpdir(void);
/* Deterministic pseudo-random fill. */
void th_fill(void *p, size_t n, uint64_t seed);

#define TEST(name)                                                            \
    static void name(void);                                                   \
    __attribute__((constructor)) static void th_reg_##name(void) { th_register(#name, name); } \
    static void name(void)

#define CHECK(cond) do { if (!(cond)) th_fail(__FILE__, __LINE__, #cond); } while (0)
#define REQUIRE(cond) do { if (!(cond)) { th_fail(__FILE__, __LINE__, #cond); return; } } while (0)
#define CHECK_OK(expr) do { int th_r_ = (expr); if (th_r_ != 0) th_fail_status(__FILE__, __LINE__, #expr, th_r_); } while (0)
#define REQUIRE_OK(expr) do { int th_r_ = (expr); if (th_r_ != 0) { th_fail_status(__FILE__, __LINE__, #expr, th_r_); return; } } while (0)
/* Expects status `st` from expr and, if `substr` is non-NULL, that sck_last_error() contains it. */
#define CHECK_ERR(expr, st, substr) do { int th_r_ = (expr);                              \
        if (th_r_ != (st)) th_fail_status(__FILE__, __LINE__, #expr " (expected " #st ")", th_r_); \
        else if ((substr) && !strstr(sck_last_error(), (substr))) {                         \
            fprintf(stderr, "  message was: %s\n", sck_last_error());                        \
            th_fail(__FILE__, __LINE__, "message of " #expr " lacks \"" substr "\""); } } while (0)

#endif
