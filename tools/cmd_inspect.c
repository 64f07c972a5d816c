/* cmd_inspect.c - `shardckpt inspect PATH [--json | --flat] [--depth N]`: what a checkpoint holds.
 * Default: a tree grouping keys by dotted prefix with sizes per group; --flat: one table row per
 * entry; --json: the schema in docs/CLI.md, for scripts. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const USAGE =
    "usage: shardckpt inspect PATH [--json | --flat] [--depth N]\n"
    "\n"
    "Shows what a checkpoint holds: a DCP directory, a .safetensors file or a Hugging Face\n"
    "sharded directory.  Reads metadata and headers, and the (small) items of Python values.\n"
    "PATH may also be a torch.save .pt file: its tensors (key path, dtype, shape, size, storage)\n"
    "and plain values, read without running its pickle (other globals, e.g. os.system, refused).\n"
    "\n"
    "  (default)   a tree of keys grouped by dotted prefix: each group with its total size,\n"
    "              each tensor with dtype, global shape, size and number of saved chunks, each\n"
    "              value with its Python type and, when short, the value itself (step  int  = 5)\n"
    "  --depth N   expand groups only N levels deep (the rest shown as totals)\n"
    "  --flat      one row per entry: KEY KIND DTYPE SHAPE CHUNKS BYTES FILE\n"
    "  --json      machine-readable output (schema \"shardckpt.inspect/1\", see docs/CLI.md)\n"
    "\n"
    "Exit status: 0 ok, 1 the checkpoint cannot be read, 2 bad usage.\n";

static uint64_t entry_bytes(const cli_entry *e) {
    if (e->kind != CLI_VALUE) return e->info.nbytes;
    char *js = sck_value_to_json(e->value);
    uint64_t n = js ? strlen(js) : 0;
    free(js);
    return n;
}

/* Type and inline text of a non-tensor entry (docs/CLI.md: "= 5", or a summary in parentheses). */
static void entry_text(cli_src *s, const cli_entry *e, char *type, size_t tcap, char *text, size_t cap) {
    sck_value *owned = NULL;
    const sck_value *v = e->value;
    if (e->kind == CLI_BYTES) {
        if (cli_src_value(s, e, &owned)) {
            snprintf(type, tcap, "bytes");
            snprintf(text, cap, "(unreadable: %.160s)", sck_last_error());
            return;
        }
        v = owned;
    }
    char t2[160];
    int inline_ = cli_value_text(v, type, tcap, t2, sizeof t2);
    snprintf(text, cap, "%s%s", inline_ ? "= " : "", t2);
    sck_value_free(owned);
}

static const char *kind_name(cli_kind k) { return k == CLI_TENSOR ? "tensor" : k == CLI_BYTES ? "bytes" : "value"; }

/* ---- --flat ---- */

static int print_flat(cli_src *s) {
    uint64_t total = 0;
    printf("%-48s %-6s %-9s %-20s %6s %12s  %s\n", "KEY", "KIND", "DTYPE", "SHAPE", "CHUNKS", "BYTES", "FILE");
    for (size_t i = 0; i < s->n; i++) {
        const cli_entry *e = &s->e[i];
        char shape[256] = "-", bytes[32];
        if (e->kind == CLI_TENSOR) {  /* "[9,5]": no spaces, so every column is one word */
            size_t k = (size_t)snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < e->info.ndim && k < sizeof shape; d++)
                k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ",%" PRId64 : "%" PRId64, e->info.shape[d]);
            if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        }
        uint64_t nb = entry_bytes(e);
        cli_human(nb, bytes, sizeof bytes);
        total += nb;
        printf("%-48s %-6s %-9s %-20s %6zu %12s  %s%s\n", e->key, kind_name(e->kind),
               e->kind == CLI_TENSOR ? sck_dtype_name(e->info.dtype) : "-", shape, e->kind == CLI_VALUE ? (size_t)0 : e->info.nchunks,
               bytes, e->kind == CLI_VALUE ? "__metadata__" : e->info.file, e->info.nchunks > 1 ? " ..." : "");
    }
    char t[32];
    cli_human(total, t, sizeof t);
    printf("%zu entries, %s\n", s->n, t);
    return 0;
}

/* ---- --json ---- */

/* fprintf for the JSON in memory: 0 or SCK_ERR_NOMEM, for `rc |=`. */
static int jp(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jp(FILE *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vfprintf(f, fmt, ap);
    va_end(ap);
    return k < 0 ? SCK_ERR_NOMEM : SCK_OK;
}

static int print_json(cli_src *s) {
    char *mem = NULL;
    size_t memlen = 0;
    FILE *b = open_memstream(&mem, &memlen); /* the whole document, printed only once complete */
    if (!b) return sck_err(SCK_ERR_NOMEM, "out of memory"), cli_fail();
    uint64_t total = 0;
    int rc = jp(b, "{\"schema\":\"shardckpt.inspect/1\",\"path\":");
    rc |= cli_json_string(b, s->path);
    rc |= jp(b, ",\"format\":\"%s\",\"entries\":[", s->format);
    for (size_t i = 0; i < s->n && !rc; i++) {
        const cli_entry *e = &s->e[i];
        uint64_t nb = entry_bytes(e);
        total += nb;
        rc |= jp(b, "%s{\"key\":", i ? "," : "");
        rc |= cli_json_string(b, e->key);
        rc |= jp(b, ",\"kind\":\"%s\",\"nbytes\":%" PRIu64, kind_name(e->kind), nb);
        if (e->kind != CLI_TENSOR) {
            sck_value *owned = NULL;
            const sck_value *v = e->value;
            if (e->kind == CLI_BYTES) {
                if (cli_src_value(s, e, &owned)) {
                    fclose(b);
                    free(mem);
                    return cli_fail();
                }
                v = owned;
            }
            char type[160], text[200];
            cli_value_text(v, type, sizeof type, text, sizeof text);
            rc |= jp(b, ",\"type\":");
            rc |= cli_json_string(b, type);
            if (sck_value_kind_of(v) != SCK_VAL_PICKLE) {   /* a pickled object has no JSON form but its hex */
                char *js = sck_value_to_json(v);
                rc |= js ? jp(b, ",\"value\":%s", js) : SCK_ERR_NOMEM;
                free(js);
            }
            sck_value_free(owned);
            if (e->kind == CLI_VALUE) {
                rc |= jp(b, "}");
                continue;
            }
        }
        sck_value *path = NULL; /* where the entry sits in the nested state dict */
        if (!rc && (rc = sck_ckpt_entry_path(s->ck, e->index, &path)) == SCK_OK) {
            char *js = sck_value_to_json(path);
            rc |= js ? jp(b, ",\"path\":%s", js) : SCK_ERR_NOMEM;
            free(js);
        }
        sck_value_free(path);
        if (e->kind == CLI_TENSOR) {
            rc |= jp(b, ",\"dtype\":\"%s\",\"shape\":[", sck_dtype_name(e->info.dtype));
            for (int d = 0; d < e->info.ndim; d++) rc |= jp(b, d ? ",%" PRId64 : "%" PRId64, e->info.shape[d]);
            rc |= jp(b, "]");
        }
        rc |= jp(b, ",\"chunks\":[");
        for (size_t c = 0; c < e->info.nchunks && !rc; c++) {
            sck_chunk_info ci;
            if ((rc = sck_ckpt_chunk(s->ck, e->index, c, &ci))) break;
            rc |= jp(b, "%s{", c ? "," : "");
            if (e->kind == CLI_TENSOR) {
                rc |= jp(b, "\"offsets\":[");
                for (int d = 0; d < e->info.ndim; d++) rc |= jp(b, d ? ",%" PRId64 : "%" PRId64, ci.offsets[d]);
                rc |= jp(b, "],\"sizes\":[");
                for (int d = 0; d < e->info.ndim; d++) rc |= jp(b, d ? ",%" PRId64 : "%" PRId64, ci.sizes[d]);
                rc |= jp(b, "],");
            }
            rc |= jp(b, "\"file\":");
            rc |= cli_json_string(b, ci.file);
            rc |= jp(b, ",\"offset\":%" PRIu64 ",\"length\":%" PRIu64 "}", ci.offset, ci.length);
        }
        rc |= jp(b, "]}");
    }
    rc |= jp(b, "],\"total_bytes\":%" PRIu64 ",\"files\":%zu}\n", total, s->nfiles);
    if (fclose(b) != 0) rc = SCK_ERR_NOMEM;
    if (rc) {
        free(mem);
        sck_err(SCK_ERR_NOMEM, "out of memory");
        return cli_fail();
    }
    fwrite(mem, 1, memlen, stdout);
    free(mem);
    return 0;
}

/* ---- tree ---- */

/* Segment `level` of key: start and length (len 0 and *start NULL when the key has fewer). */
static const char *segment(const char *key, int level, size_t *len) {
    const char *p = key;
    for (int i = 0; i < level; i++) {
        p = strchr(p, '.');
        if (!p) {
            *len = 0;
            return NULL;
        }
        p++;
    }
    const char *dot = strchr(p, '.');
    *len = dot ? (size_t)(dot - p) : strlen(p);
    return p;
}

static int all_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* Natural order by segments: "layers.2" before "layers.10"; a key before its own children. */
static int cmp_natural(const void *pa, const void *pb) {
    const char *a = (*(const cli_entry *const *)pa)->key, *b = (*(const cli_entry *const *)pb)->key;
    for (int lv = 0;; lv++) {
        size_t la, lb;
        const char *sa = segment(a, lv, &la), *sb = segment(b, lv, &lb);
        if (!sa || !sb) return sa ? 1 : sb ? -1 : 0;
        if (all_digits(sa, la) && all_digits(sb, lb)) {
            while (la > 1 && *sa == '0') sa++, la--;
            while (lb > 1 && *sb == '0') sb++, lb--;
            if (la != lb) return la < lb ? -1 : 1;
        }
        size_t m = la < lb ? la : lb;
        int c = memcmp(sa, sb, m);
        if (c) return c;
        if (la != lb) return la < lb ? -1 : 1;
    }
}

typedef struct tree {
    cli_src *s;
    const cli_entry **e;
    int depth;          /* expand this many levels; <0: all */
    int width;          /* name column */
} tree;

/* Same segment `level` (and every one before it, which the caller guarantees). */
static int same_seg(const char *a, const char *b, int level) {
    size_t la, lb;
    const char *sa = segment(a, level, &la), *sb = segment(b, level, &lb);
    return sa && sb && la == lb && !memcmp(sa, sb, la);
}

static int has_seg(const char *k, int level) {
    size_t l;
    return segment(k, level, &l) != NULL;
}

/* Visits [lo, hi) at `level`: calls line() for every group and leaf, in order. */
typedef void (*line_fn)(tree *t, int indent, const char *name, size_t nlen, int group, size_t lo, size_t hi);

static void walk(tree *t, size_t lo, size_t hi, int level, int indent, line_fn line) {
    for (size_t i = lo; i < hi;) {
        const char *k = t->e[i]->key;
        size_t sl;
        const char *seg = segment(k, level, &sl);
        size_t j = i + 1;
        while (j < hi && same_seg(k, t->e[j]->key, level)) j++;
        if (!has_seg(k, level + 1)) {   /* the key ends here: a leaf, even if it has children too */
            line(t, indent, seg, sl, 0, i, i + 1);
            i++;
            if (j == i) continue;
        }
        if (j - i == 1) {               /* a lone entry: no group, show the rest of its key */
            line(t, indent, seg, strlen(seg), 0, i, j);
            i = j;
            continue;
        }
        /* a group; fold single-child chains into one name ("layers.0") */
        int lv = level;
        while (1) {
            int fold = 1;
            for (size_t x = i; x < j && fold; x++)
                fold = has_seg(t->e[x]->key, lv + 2) && same_seg(t->e[i]->key, t->e[x]->key, lv + 1);
            if (!fold) break;
            lv++;
        }
        size_t el;
        const char *last = segment(t->e[i]->key, lv, &el);
        line(t, indent, seg, (size_t)(last + el - seg), 1, i, j);
        if (t->depth < 0 || indent / 2 + 1 < t->depth) walk(t, i, j, lv + 1, indent + 2, line);
        i = j;
    }
}

static void measure(tree *t, int indent, const char *name, size_t nlen, int group, size_t lo, size_t hi) {
    (void)name;
    (void)lo;
    (void)hi;
    int w = indent + (int)nlen + (group ? 1 : 0);
    if (w > t->width) t->width = w;
}

static void print_line(tree *t, int indent, const char *name, size_t nlen, int group, size_t lo, size_t hi) {
    char label[512], bytes[32];
    int k = snprintf(label, sizeof label, "%*s%.*s%s", indent, "", (int)nlen, name, group ? "/" : "");
    (void)k;
    if (group) {
        uint64_t total = 0;
        size_t nt = 0;
        for (size_t i = lo; i < hi; i++) {
            total += entry_bytes(t->e[i]);
            nt += t->e[i]->kind == CLI_TENSOR;
        }
        cli_human(total, bytes, sizeof bytes);
        char what[64];
        if (nt == hi - lo) snprintf(what, sizeof what, "%zu tensors", nt);
        else snprintf(what, sizeof what, "%zu entries", hi - lo);
        printf("%-*s  %-9s %-18s %10s  %s\n", t->width, label, "", "", bytes, what);
        return;
    }
    const cli_entry *e = t->e[lo];
    cli_human(entry_bytes(e), bytes, sizeof bytes);
    if (e->kind == CLI_TENSOR) {
        char shape[256], chunks[32];
        cli_shape(e->info.ndim, e->info.shape, shape, sizeof shape);
        snprintf(chunks, sizeof chunks, "%zu chunk%s", e->info.nchunks, e->info.nchunks == 1 ? "" : "s");
        printf("%-*s  %-9s %-18s %10s  %s\n", t->width, label, sck_dtype_name(e->info.dtype), shape, bytes,
               e->info.nchunks ? chunks : "no chunks");
    } else {
        char type[160], text[200];
        entry_text(t->s, e, type, sizeof type, text, sizeof text);
        /* a pickled object's name, often long, leads its text instead */
        int pickled = text[0] != '=' && text[0] != '(';
        printf("%-*s  %-9s %-18s %10s  %s\n", t->width, label, pickled ? "value" : type, "", bytes, text);
    }
}

static int print_tree(cli_src *s, int depth) {
    tree t = {s, NULL, depth, 0};
    t.e = malloc((s->n ? s->n : 1) * sizeof *t.e);
    if (!t.e) {
        sck_err(SCK_ERR_NOMEM, "out of memory");
        return cli_fail();
    }
    uint64_t total = 0;
    size_t nt = 0;
    for (size_t i = 0; i < s->n; i++) {
        t.e[i] = &s->e[i];
        total += entry_bytes(&s->e[i]);
        nt += s->e[i].kind == CLI_TENSOR;
    }
    qsort(t.e, s->n, sizeof *t.e, cmp_natural);
    char tb[32];
    cli_human(total, tb, sizeof tb);
    const char *fmt = !strcmp(s->format, "dcp") ? "DCP checkpoint" : !strcmp(s->format, "hf") ? "Hugging Face sharded" : "safetensors";
    printf("%s: %s, %zu entries (%zu tensors, %zu other), %s in %zu file%s\n\n", s->path, fmt, s->n, nt, s->n - nt, tb,
           s->nfiles, s->nfiles == 1 ? "" : "s");
    walk(&t, 0, s->n, 0, 0, measure);
    if (t.width > 60) t.width = 60;
    walk(&t, 0, s->n, 0, 0, print_line);
    free(t.e);
    return 0;
}

/* A torch.save file: what it is, then each tensor and value by key path (its pickle is never run). */
static int print_pt(const char *path) {
    sck_pt *pt;
    if (sck_pt_open(path, &pt)) return cli_fail();
    uint64_t total = 0;
    size_t nt = 0, n = sck_pt_count(pt);
    sck_pt_info e;
    for (size_t i = 0; i < n; i++) {
        sck_pt_entry(pt, i, &e);
        if (!e.is_tensor) continue;
        nt++;
        total += e.nbytes;
    }
    char hb[32], shape[256];
    cli_human(total, hb, sizeof hb);
    printf("%s: torch.save archive (%s/), %zu tensors (%s), %zu values\n", path, sck_pt_prefix(pt), nt, hb, n - nt);
    for (size_t i = 0; i < n; i++) {
        sck_pt_entry(pt, i, &e);
        if (!e.is_tensor) {
            printf("  %s = %s  (%s)\n", e.key[0] ? e.key : "(root)", e.text, e.type);
            continue;
        }
        cli_shape(e.ndim, e.shape, shape, sizeof shape);
        cli_human(e.nbytes, hb, sizeof hb);
        printf("  %s  %s %s  %s  (storage data/%s, offset %lld)\n", e.key[0] ? e.key : "(root)", sck_dtype_name(e.dtype), shape,
               hb, e.storage, (long long)e.storage_offset);
    }
    sck_pt_close(pt);
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) return fputs(USAGE, stdout), 0;
    const char *path = NULL;
    int json = 0, flat = 0, depth = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--flat")) flat = 1;
        else if (!strcmp(argv[i], "--depth")) {
            char *end;
            long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || *end || v < 1 || v > 1000) return cli_usage_error("inspect", "--depth wants a positive integer");
            depth = (int)v;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (!path) path = argv[i];
        else return cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
    }
    if (!path) return cli_usage_error("inspect", "missing PATH");
    if (json && flat) return cli_usage_error("inspect", "--json and --flat exclude each other");
    if (sck_pt_probe(path)) {
        if (json || flat) return cli_usage_error("inspect", "--json and --flat are for checkpoints, not a torch.save file");
        return print_pt(path);
    }
    cli_src s;
    if (cli_src_open(&s, path)) return cli_fail();
    int rc = json ? print_json(&s) : flat ? print_flat(&s) : print_tree(&s, depth);
    cli_src_close(&s);
    return rc;
}
