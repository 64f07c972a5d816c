/* key_select.c - include / exclude globs and prefix stripping over checkpoint keys (key_select.h). */
#include "base/key_select.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int matches_any(const char *const *globs, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (fnmatch(globs[i], key, 0) == 0) return 1;
    return 0;
}

const char *sck_key_select_name(const sck_key_select *s, const char *key) {
    if (!s) return key;
    if (s->ninclude && !matches_any(s->include, s->ninclude, key)) return NULL;
    if (matches_any(s->exclude, s->nexclude, key)) return NULL;
    size_t p = s->strip_prefix ? strlen(s->strip_prefix) : 0;
    if (p && !strncmp(key, s->strip_prefix, p) && key[p]) return key + p;
    return key;
}

typedef struct named {
    const char *name, *key;
} named;

static int by_name(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->key, y->key);
}

int sck_key_select_apply(const sck_key_select *s, const char *what, const char *const *keys, size_t n,
                         const char **out) {
    named *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return sck_err(SCK_ERR_NOMEM, "%s: out of memory selecting %zu keys", what, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = sck_key_select_name(s, keys[i]);
        if (out[i]) v[kept++] = (named){out[i], keys[i]};
    }
    qsort(v, kept, sizeof *v, by_name);
    int rc = SCK_OK;
    for (size_t i = 1; i < kept && !rc; i++)
        if (!strcmp(v[i - 1].name, v[i].name))
            rc = sck_err(SCK_ERR_INVALID_ARG, "%s: keys '%s' and '%s' would both be named '%s'", what, v[i - 1].key,
                         v[i].key, v[i].name);
    free(v);
    return rc;
}
