/* cmd_common.c - what the subcommands share: error and usage messages, sizes and shapes, and a
 * checkpoint of any format seen as one sorted list of entries (tensors, byte items, values). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int cli_fail(void) {
    fprintf(stderr, "shardckpt: error: %s\n", sck_last_error());
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shardckpt: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'shardckpt %s --help'.\n", cmd);
    return 2;
}

/* Room for a message naming a few paths; sck_err fits the whole into its 1 KiB as the library does. */
#define CLI_MSG_MAX (3 * 4096)

int cli_err_errno(int status, int errnum, const char *fmt, ...) {
    char msg[CLI_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sck_err(status, "%s: %s", msg, strerror(errnum));
}

int cli_err_wrap(int status, const char *fmt, ...) {
    char prefix[CLI_MSG_MAX], prev[1100];
    snprintf(prev, sizeof prev, "%s", sck_last_error()); /* sck_err overwrites it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return sck_err(status, "%s: %s", prefix, prev);
}

int cli_json_string(FILE *f, const char *s) {
    sck_value *v = sck_value_string(s);
    char *js = v ? sck_value_to_json(v) : NULL;
    int rc = js && fputs(js, f) >= 0 ? SCK_OK : SCK_ERR_NOMEM;
    free(js);
    sck_value_free(v);
    return rc;
}

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

void cli_human(uint64_t n, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    if (i == 0) snprintf(buf, cap, "%" PRIu64 " B", n);
    else snprintf(buf, cap, "%.1f %s", v, units[i]);
}

void cli_shape(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, d ? ", %" PRId64 : "%" PRId64, shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const cli_entry *)a)->key, ((const cli_entry *)b)->key);
}

int cli_src_open(cli_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    struct stat sb;
    char p[4096];
    s->format = "safetensors";
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(p, sizeof p, "%s/.metadata", path);
        s->format = stat(p, &sb) == 0 ? "dcp" : "hf";
    }
    int rc = sck_ckpt_open(path, &s->ck);
    if (!rc && strcmp(s->format, "dcp")) rc = sck_safetensors_values(path, &s->values);
    size_t nck = rc ? 0 : sck_ckpt_count(s->ck), nv = sck_value_len(s->values);
    if (!rc && !(s->e = calloc(nck + nv + 1, sizeof *s->e))) rc = sck_err(SCK_ERR_NOMEM, "out of memory");
    const char **files = rc ? NULL : calloc(nck + 1, sizeof *files);
    if (!rc && !files) rc = sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nck && !rc; i++) {
        cli_entry *e = &s->e[s->n++];
        sck_ckpt_entry(s->ck, i, &e->info);
        e->key = e->info.key;
        e->kind = e->info.kind == SCK_ENTRY_TENSOR ? CLI_TENSOR : CLI_BYTES;
        e->index = i;
        /* distinct files over every chunk */
        for (size_t c = 0; c < e->info.nchunks; c++) {
            sck_chunk_info ci;
            if (sck_ckpt_chunk(s->ck, i, c, &ci)) continue;
            size_t f = 0;
            while (f < s->nfiles && strcmp(files[f], ci.file)) f++;
            if (f == s->nfiles) {
                const char **nf = realloc(files, (s->nfiles + 2) * sizeof *files);
                if (!nf) {
                    rc = sck_err(SCK_ERR_NOMEM, "out of memory");
                    break;
                }
                files = nf;
                files[s->nfiles++] = ci.file;
            }
        }
    }
    /* __metadata__ values; a key that is also a tensor stays the tensor */
    for (size_t i = 0; i < nv && !rc; i++) {
        const char *key = sck_value_key_at(s->values, i);
        if (sck_ckpt_find(s->ck, key) >= 0) continue;
        cli_entry *e = &s->e[s->n++];
        e->key = key;
        e->kind = CLI_VALUE;
        e->value = sck_value_at(s->values, i);
    }
    free(files);
    if (rc) {
        cli_src_close(s);
        return rc;
    }
    qsort(s->e, s->n, sizeof *s->e, cmp_entry);
    return SCK_OK;
}

void cli_src_close(cli_src *s) {
    sck_ckpt_close(s->ck);
    sck_value_free(s->values);
    free(s->e);
    memset(s, 0, sizeof *s);
}

int cli_src_value(cli_src *s, const cli_entry *e, sck_value **out) {
    *out = NULL;
    if (e->kind == CLI_VALUE) {
        *out = sck_value_clone(e->value);
        return *out ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    }
    if (e->kind != CLI_BYTES) return sck_err(SCK_ERR_INVALID_ARG, "'%s' is a tensor", e->key);
    void *raw = NULL;
    size_t n = 0;
    int rc = sck_ckpt_read_bytes(s->ck, e->index, &raw, &n, out);
    if (rc) return rc;
    if (!*out) {
        *out = sck_value_bytes(raw, n);
        if (!*out) rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory", e->key);
    }
    free(raw);
    return rc;
}

int cli_value_text(const sck_value *v, char *type, size_t tcap, char *text, size_t cap) {
    static const char *const names[] = {"None", "bool", "int", "float", "str", "bytes", "list", "dict", "tuple", "int", "pickle"};
    sck_value_kind k = sck_value_kind_of(v);
    size_t n = 0;
    const char *s = sck_value_get_string(v, &n);
    char h[32];
    if (k == SCK_VAL_PICKLE) {
        char what[200];
        sck_value_describe_pickle(v, what, sizeof what);
        cli_human(n, h, sizeof h);
        snprintf(type, tcap, "%s", what);
        snprintf(text, cap, "%s (raw pickle, %s)", what, h);
        return 0;
    }
    snprintf(type, tcap, "%s", (size_t)k < sizeof names / sizeof *names ? names[k] : "?");
    char *js = k == SCK_VAL_BYTES && n > 16 ? NULL : sck_value_to_json(v);
    if (js && strlen(js) <= CLI_INLINE_MAX) {
        snprintf(text, cap, "%s", js);
        free(js);
        return 1;
    }
    size_t jn = js ? strlen(js) : 0;
    free(js);
    switch (k) {
    case SCK_VAL_STRING: snprintf(text, cap, "(%zu bytes of text)", n); break;
    case SCK_VAL_BYTES: cli_human(n, h, sizeof h), snprintf(text, cap, "(%s)", h); break;
    case SCK_VAL_BIGINT: snprintf(text, cap, "(%zu digits)", n - (s[0] == '-')); break;
    case SCK_VAL_LIST:
    case SCK_VAL_TUPLE:
    case SCK_VAL_DICT:
        cli_human(jn, h, sizeof h);
        snprintf(text, cap, "(%zu %s, %s as JSON)", sck_value_len(v), k == SCK_VAL_DICT ? "keys" : "items", h);
        break;
    default: snprintf(text, cap, "?"); break;
    }
    return 0;
}
