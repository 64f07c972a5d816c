/* harness.c - registry, runner and helpers behind harness.h. */
#include "harness.h"

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct { const char *name; th_fn fn; } th_test;
static th_test *g_tests;
static size_t g_ntests, g_cap;
static int g_cur_failed;
static char g_tmp[4096];
static int g_tmp_made;

void th_register(const char *name, th_fn fn) {
    if (g_ntests == g_cap) {
        g_cap = g_cap ? g_cap * 2 : 64;
        th_test *t = realloc(g_tests, g_cap * sizeof *t);
        if (!t) { fprintf(stderr, "harness: out of memory\n"); _exit(2); }
        g_tests = t;
    }
    g_tests[g_ntests].name = name;
    g_tests[g_ntests].fn = fn;
    g_ntests++;
}

void th_fail(const char *file, int line, const char *what) {
    g_cur_failed = 1;
    fprintf(stderr, "  %s:%d: check failed: %s\n", file, line, what);
}

void th_fail_status(const char *file, int line, const char *what, int status) {
    g_cur_failed = 1;
    fprintf(stderr, "  %s:%d: %s returned %d (%s): %s\n", file, line, what, status,
            sck_status_name(status), sck_last_error());
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

const char *th_tmpdir(void) {
    if (!g_tmp_made) {
        const char *base = getenv("TMPDIR");
        snprintf(g_tmp, sizeof g_tmp, "%s/sck_test_XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(g_tmp)) { perror("mkdtemp"); _exit(2); }
        g_tmp_made = 1;
    }
    return g_tmp;
}

static void tmp_cleanup(void) {
    if (g_tmp_made && !getenv("SCK_KEEP_TMP")) nftw(g_tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    g_tmp_made = 0;
}

void th_fill(void *p, size_t n, uint64_t seed) {
    uint8_t *b = p;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    for (size_t i = 0; i < g_ntests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        g_cur_failed = 0;
        g_tests[i].fn();
        tmp_cleanup();
        if (g_cur_failed) { failed++; printf("FAIL %s\n", g_tests[i].name); }
        else { passed++; printf("ok   %s\n", g_tests[i].name); }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
