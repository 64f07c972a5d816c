/* cmd_diff.c - `shardckpt diff A B`: entries added, removed and changed between two checkpoints of
 * any formats and shardings, with the largest absolute difference of every tensor.  Tensors are
 * compared block by block (two 16 MiB buffers at most), values by their JSON-like content, strings
 * (safetensors __metadata__ text among them) byte for byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "elem_value.h"
#include "progress.h"

#define BLOCK_BYTES (16u << 20)

static const char *const USAGE =
    "usage: shardckpt diff A B [--atol X] [-q | -v]\n"
    "\n"
    "Compares two checkpoints, each a DCP directory, a .safetensors file or a Hugging Face\n"
    "sharded directory, whatever sharding they were saved with.\n"
    "\n"
    "  - KEY   only in A (removed)         + KEY   only in B (added)\n"
    "  ~ KEY   in both but different: kind, dtype or shape, values, or tensor elements (with the\n"
    "          largest absolute difference and how many elements differ)\n"
    "\n"
    "Elements are compared as numbers (in double for floats, exactly for integers): -0.0 equals 0.0\n"
    "and NaN equals NaN.  Bytes and values are compared by content, strings (such as safetensors\n"
    "__metadata__ text) byte for byte, naming the first byte that differs.\n"
    "\n"
    "  --atol X   elements whose absolute difference is at most X count as equal (default 0)\n"
    "  -q         print nothing; only the exit status tells\n"
    "  -v         also list the identical entries\n"
    "\n"
    "Exit status: 0 identical, 1 different, 2 bad usage or a checkpoint that cannot be read.\n";

typedef struct diffstat {
    double max_abs;
    uint64_t ndiff, nnan;
} diffstat;

/* Element i of a and b differ by *d (NaN == NaN; a NaN against a number counts in nnan, returns 0). */
static int elem_diff(sck_dtype dt, elem_class c, const uint8_t *a, const uint8_t *b, double *d, diffstat *s) {
    if (c == ELEM_FLOAT || c == ELEM_COMPLEX) {
        *d = 0;
        for (int k = 0; k < (c == ELEM_COMPLEX ? 2 : 1); k++) {
            double x = elem_float(dt, a, k), y = elem_float(dt, b, k);
            if (isnan(x) || isnan(y)) {
                if (isnan(x) && isnan(y)) continue;
                s->nnan++;
                return 0;
            }
            double dk = x == y ? 0 : fabs(x - y);
            if (dk > *d) *d = dk;
        }
    } else if (c == ELEM_SIGNED) {
        int64_t x = elem_signed(dt, a), y = elem_signed(dt, b);
        *d = (double)(x > y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x); /* exact, then rounded once */
    } else {
        uint64_t x = elem_unsigned(dt, a), y = elem_unsigned(dt, b);
        *d = (double)(x > y ? x - y : y - x);
    }
    return 1;
}

static void compare_block(sck_dtype dt, const uint8_t *a, const uint8_t *b, uint64_t n, double atol, diffstat *s) {
    size_t el = sck_dtype_size(dt);
    elem_class c = elem_class_of(dt);
    for (uint64_t i = 0; i < n; i++, a += el, b += el) {
        if (!memcmp(a, b, el)) continue;
        double d;
        if (!elem_diff(dt, c, a, b, &d, s)) {
            s->ndiff++;
            continue;
        }
        if (d > s->max_abs) s->max_abs = d;
        if (d > atol) s->ndiff++;
    }
}

static int compare_tensor(cli_src *a, const cli_entry *ea, cli_src *b, const cli_entry *eb, double atol, diffstat *s,
                          uint8_t *ba, uint8_t *bb, progress *pg) {
    const sck_entry_info *e = &ea->info;
    size_t el = sck_dtype_size(e->dtype);
    uint64_t numel = 1, per = BLOCK_BYTES / el;
    for (int d = 0; d < e->ndim; d++) numel *= (uint64_t)e->shape[d];
    for (uint64_t at = 0; at < numel; at += per) {
        uint64_t cnt = numel - at < per ? numel - at : per;
        int rc = sck_ckpt_read_flat(a->ck, ea->index, at, cnt, ba);
        if (rc) return cli_err_wrap(rc, "%s", a->path);
        if ((rc = sck_ckpt_read_flat(b->ck, eb->index, at, cnt, bb))) return cli_err_wrap(rc, "%s", b->path);
        compare_block(e->dtype, ba, bb, cnt, atol, s);
        progress_add(pg, cnt * el);
    }
    return SCK_OK;
}

typedef struct counts {
    size_t added, removed, changed, same;
} counts;

static void describe(const cli_entry *e, char *buf, size_t cap) {
    if (e->kind == CLI_TENSOR) {
        char sh[200];
        cli_shape(e->info.ndim, e->info.shape, sh, sizeof sh);
        snprintf(buf, cap, "%s %s", sck_dtype_name(e->info.dtype), sh);
    } else {
        snprintf(buf, cap, "%s", e->kind == CLI_BYTES ? "bytes" : "value");
    }
}

static void preview(const sck_value *v, char *buf, size_t cap) {
    if (sck_value_kind_of(v) == SCK_VAL_PICKLE) {   /* "set (raw pickle, 39 B)", as inspect shows it */
        char type[160];
        cli_value_text(v, type, sizeof type, buf, cap);
        return;
    }
    char *js = sck_value_to_json(v);
    snprintf(buf, cap, "%.60s%s", js ? js : "?", js && strlen(js) > 60 ? "..." : "");
    free(js);
}

/* The offset of the first byte where two strings differ (the shorter one's length if one is a prefix). */
static size_t first_difference(const sck_value *a, const sck_value *b) {
    size_t na, nb, i = 0;
    const char *sa = sck_value_get_string(a, &na), *sb = sck_value_get_string(b, &nb);
    while (i < na && i < nb && sa[i] == sb[i]) i++;
    return i;
}

/* Compares one key present on both sides.  Returns 0 same, 1 different, <0 error. */
static int diff_entry(cli_src *a, const cli_entry *ea, cli_src *b, const cli_entry *eb, double atol, int quiet,
                      uint8_t *ba, uint8_t *bb, progress *pg) {
    char da[256], db[256];
    describe(ea, da, sizeof da);
    describe(eb, db, sizeof db);
    int both_tensors = ea->kind == CLI_TENSOR && eb->kind == CLI_TENSOR;
    /* a DCP byte item and a safetensors __metadata__ value are both compared by content */
    if ((ea->kind == CLI_TENSOR) != (eb->kind == CLI_TENSOR) || (both_tensors && strcmp(da, db))) {
        if (!quiet) printf("~ %-40s %s -> %s\n", ea->key, da, db);
        return 1;
    }
    if (both_tensors) {
        if (ea->info.dtype >= SCK_DTYPE_COUNT)
            return sck_err(SCK_ERR_UNSUPPORTED, "'%s': cannot compare a dtype shardckpt does not support", ea->key);
        diffstat s = {0, 0, 0};
        int rc = compare_tensor(a, ea, b, eb, atol, &s, ba, bb, pg);
        if (rc) return rc;
        if (!s.ndiff) return 0;
        if (!quiet) {
            uint64_t numel = 1;
            for (int d = 0; d < ea->info.ndim; d++) numel *= (uint64_t)ea->info.shape[d];
            printf("~ %-40s %s  max abs diff %.6g, %llu of %llu elements differ", ea->key, da, s.max_abs,
                   (unsigned long long)s.ndiff, (unsigned long long)numel);
            if (s.nnan) printf(" (%llu NaN in one only)", (unsigned long long)s.nnan);
            printf("\n");
        }
        return 1;
    }
    sck_value *va = NULL, *vb = NULL;
    int rc = cli_src_value(a, ea, &va);
    if (!rc) rc = cli_src_value(b, eb, &vb);
    if (!rc) {
        rc = !sck_value_equal(va, vb);
        if (rc && !quiet) {
            char pa[80], pb[80];
            preview(va, pa, sizeof pa);
            preview(vb, pb, sizeof pb);
            printf("~ %-40s %s -> %s", ea->key, pa, pb);
            if (sck_value_kind_of(va) == SCK_VAL_STRING && sck_value_kind_of(vb) == SCK_VAL_STRING)
                printf("  (text differs from byte %zu)", first_difference(va, vb));
            printf("\n");
        }
    }
    sck_value_free(va);
    sck_value_free(vb);
    return rc;
}

static int run_diff(cli_src *a, cli_src *b, double atol, int quiet, int verbose, counts *c) {
    uint64_t total = 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->e[i].kind == CLI_TENSOR) total += a->e[i].info.nbytes;
    uint8_t *ba = malloc(BLOCK_BYTES), *bb = malloc(BLOCK_BYTES);
    if (!ba || !bb) {
        free(ba);
        free(bb);
        return sck_err(SCK_ERR_NOMEM, "out of memory for the comparison buffers");
    }
    progress *pg = quiet ? NULL : progress_start("comparing", total);
    int rc = SCK_OK;
    size_t i = 0, j = 0;
    while ((i < a->n || j < b->n) && rc >= 0) {
        int cmp = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->e[i].key, b->e[j].key);
        char d[256];
        if (cmp < 0) {
            describe(&a->e[i], d, sizeof d);
            if (!quiet) printf("- %-40s %s\n", a->e[i].key, d);
            if (a->e[i].kind == CLI_TENSOR) progress_add(pg, a->e[i].info.nbytes);
            c->removed++;
            i++;
        } else if (cmp > 0) {
            describe(&b->e[j], d, sizeof d);
            if (!quiet) printf("+ %-40s %s\n", b->e[j].key, d);
            c->added++;
            j++;
        } else {
            rc = diff_entry(a, &a->e[i], b, &b->e[j], atol, quiet, ba, bb, pg);
            if (rc == 1) c->changed++;
            if (rc == 0) {
                c->same++;
                describe(&a->e[i], d, sizeof d);
                if (verbose && !quiet) printf("= %-40s %s\n", a->e[i].key, d);
            }
            i++;
            j++;
        }
        fflush(stdout);
    }
    progress_end(pg);
    free(ba);
    free(bb);
    return rc < 0 ? rc : SCK_OK;
}

int cmd_diff(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) return fputs(USAGE, stdout), 0;
    const char *pa = NULL, *pb = NULL;
    double atol = 0;
    int quiet = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) verbose = 1;
        else if (!strcmp(argv[i], "--atol")) {
            char *end;
            atol = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || !(atol >= 0)) return cli_usage_error("diff", "--atol wants a number >= 0");
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("diff", "unknown option '%s'", argv[i]);
        else if (!pa) pa = argv[i];
        else if (!pb) pb = argv[i];
        else return cli_usage_error("diff", "unexpected argument '%s'", argv[i]);
    }
    if (!pa || !pb) return cli_usage_error("diff", "wants two checkpoints, A and B");
    cli_src a, b;
    if (cli_src_open(&a, pa)) return cli_fail(), 2;
    if (cli_src_open(&b, pb)) {
        cli_src_close(&a);
        return cli_fail(), 2;
    }
    counts c = {0, 0, 0, 0};
    int rc = run_diff(&a, &b, atol, quiet, verbose, &c);
    cli_src_close(&a);
    cli_src_close(&b);
    if (rc) return cli_fail(), 2;
    int differ = c.added || c.removed || c.changed;
    if (!quiet)
        printf("%s: %zu changed, %zu added, %zu removed, %zu identical\n", differ ? "different" : "identical", c.changed,
               c.added, c.removed, c.same);
    return differ;
}
