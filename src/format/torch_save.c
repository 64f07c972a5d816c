/* torch_save.c - a torch.save archive's tensors and values by key path, without running its pickle. */
#include "format/torch_save.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/storage.h"

int sck_pt_probe(const char *path) {
    if (!path) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char m[4];
    int yes = fread(m, 1, 4, f) == 4 && !memcmp(m, "PK\003\004", 4);
    fclose(f);
    return yes;
}

typedef struct walk {
    const char *path;
    const zip_dir *dir;
    sck_pt *pt;
    size_t cap;
    char key[4096];
} walk;

static int add(walk *w, pt_entry *e) {
    if (w->pt->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 16;
        pt_entry *ne = realloc(w->pt->e, nc * sizeof *ne);
        if (!ne) {
            free(e->text);
            return sck_err(SCK_ERR_NOMEM, "%s: out of memory", w->path);
        }
        w->pt->e = ne;
        w->cap = nc;
    }
    if (!(e->key = strdup(w->key))) {
        free(e->text);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->pt->e[w->pt->n++] = *e;
    return SCK_OK;
}

static int add_tensor(walk *w, const pk_obj *o) {
    pt_entry e;
    memset(&e, 0, sizeof e);
    char what[4200];
    snprintf(what, sizeof what, "%s: '%s'", w->path, w->key);
    int rc = ti_tensor_from_obj(o, what, &e.t);
    if (rc) return rc;
    char rec[80];
    snprintf(rec, sizeof rec, "data/%s", e.t.storage_key);
    const zip_rec *r = zip_find(w->dir, rec);
    if (!r) return sck_err(SCK_ERR_FORMAT, "%s: no storage record %s/%s", what, w->dir->prefix, rec);
    if (r->size < e.t.storage_bytes)
        return sck_err(SCK_ERR_FORMAT, "%s: storage %s/%s holds %llu bytes, %llu declared", what, w->dir->prefix, rec,
                       (unsigned long long)r->size, (unsigned long long)e.t.storage_bytes);
    e.is_tensor = 1;
    return add(w, &e);
}

static int add_value(walk *w, const char *type, const char *fmt, ...) SCK_PRINTF(3, 4);
static int add_value(walk *w, const char *type, const char *fmt, ...) {
    pt_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.type, sizeof e.type, "%s", type);
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!(e.text = strdup(buf))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", w->path);
    return add(w, &e);
}

static int walk_obj(walk *w, const pk_obj *o);

/* Child `name` of the current key: key "a" + "b" -> "a.b". */
static int walk_child(walk *w, const char *name, size_t name_len, const pk_obj *o) {
    size_t at = strlen(w->key);
    if (at + 1 + name_len + 1 > sizeof w->key) return sck_err(SCK_ERR_FORMAT, "%s: key path '%s...' too long", w->path, w->key);
    size_t p = at;
    if (at) w->key[p++] = '.';
    memcpy(w->key + p, name, name_len);
    w->key[p + name_len] = 0;
    int rc = walk_obj(w, o);
    w->key[at] = 0;
    return rc;
}

static int walk_items(walk *w, pk_obj *const *items, size_t n) {
    int rc = SCK_OK;
    for (size_t i = 0; i + 1 < n && !rc; i += 2) {
        const pk_obj *k = items[i];
        char num[32];
        if (k->kind == PK_STR) rc = walk_child(w, k->s, k->len, items[i + 1]);
        else if (k->kind == PK_INT) rc = walk_child(w, num, (size_t)snprintf(num, sizeof num, "%lld", (long long)k->i), items[i + 1]);
        else rc = sck_err(SCK_ERR_UNSUPPORTED, "%s: '%s' has a dict key of type %s", w->path, w->key, pk_kind_name(k->kind));
    }
    return rc;
}

static int walk_obj(walk *w, const pk_obj *o) {
    switch (o->kind) {
    case PK_NONE: return add_value(w, "None", "None");
    case PK_BOOL: return add_value(w, "bool", "%s", o->i ? "True" : "False");
    case PK_INT: return add_value(w, "int", "%lld", (long long)o->i);
    case PK_FLOAT: {
        char f[40];   /* the shortest text that reads back as the same double, as Python's repr */
        for (int prec = 15; prec <= 17; prec++)
            if (snprintf(f, sizeof f, "%.*g", prec, o->f) > 0 && strtod(f, NULL) == o->f) break;
        return add_value(w, "float", "%s", f);
    }
    case PK_STR: return add_value(w, "str", "'%.100s%s'", o->s, o->len > 100 ? "..." : "");
    case PK_BYTES: return add_value(w, "bytes", "(%zu B)", o->len);
    case PK_BIGINT: return add_value(w, "bigint", "(%zu B integer)", o->len);
    case PK_DICT: return walk_items(w, o->items, 2 * o->n);
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET: {
        int rc = SCK_OK;
        if (!o->n) return add_value(w, pk_kind_name(o->kind), "(empty)");
        for (size_t i = 0; i < o->n && !rc; i++) {
            char num[32];
            rc = walk_child(w, num, (size_t)snprintf(num, sizeof num, "%zu", i), o->items[i]);
        }
        return rc;
    }
    case PK_REDUCE:
    case PK_NEWOBJ:
        if (o->a && o->a->kind == PK_GLOBAL && !strcmp(o->a->s, "torch._utils")) return add_tensor(w, o);
        if (o->a && pk_is_global(o->a, "collections", "OrderedDict")) return walk_items(w, o->items, 2 * o->n);
        if (o->a && o->a->kind == PK_GLOBAL) {
            char t[32];
            snprintf(t, sizeof t, "%s.%s", o->a->s, o->a->name);
            return add_value(w, t, "(object, not constructed)");
        }
        return add_value(w, pk_kind_name(o->kind), "(object, not constructed)");
    default: return add_value(w, pk_kind_name(o->kind), "(not a value)");
    }
}

/* Fills *out (freed with pt_clear, also after an error). */
static int pt_read(const char *path, sck_pt *out) {
    memset(out, 0, sizeof *out);
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = sck_read_file(path, &data, &len);
    if (rc) return rc;
    zip_dir d;
    const zip_rec *pkl;
    pk_arena *arena = NULL;
    pk_obj *root = NULL;
    rc = ti_archive_pkl(data, len, path, &d, &pkl);
    char what[4200];
    snprintf(what, sizeof what, "%s: %s/data.pkl", path, d.prefix ? d.prefix : "?");
    if (!rc) rc = pk_parse(data + pkl->data_off, pkl->size, what, ti_allow_tensor, NULL, NULL, &arena, &root);
    if (!rc && !(out->prefix = strdup(d.prefix))) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    walk w = {path, &d, out, 0, ""};
    if (!rc) rc = walk_obj(&w, root);
    pk_arena_free(arena);
    zip_dir_free(&d);
    free(data);
    return rc;
}

static void pt_clear(sck_pt *pt) {
    for (size_t i = 0; i < pt->n; i++) {
        free(pt->e[i].key);
        free(pt->e[i].text);
    }
    free(pt->e);
    free(pt->prefix);
    memset(pt, 0, sizeof *pt);
}

int sck_pt_open(const char *path, sck_pt **out) {
    if (out) *out = NULL;
    if (!path || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_pt_open: NULL argument");
    sck_pt *pt = malloc(sizeof *pt);
    if (!pt) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    int rc = pt_read(path, pt);
    if (rc) {
        pt_clear(pt);
        free(pt);
        return rc;
    }
    *out = pt;
    return SCK_OK;
}

void sck_pt_close(sck_pt *pt) {
    if (!pt) return;
    pt_clear(pt);
    free(pt);
}

const char *sck_pt_prefix(const sck_pt *pt) { return pt ? pt->prefix : NULL; }

size_t sck_pt_count(const sck_pt *pt) { return pt ? pt->n : 0; }

int sck_pt_entry(const sck_pt *pt, size_t i, sck_pt_info *info) {
    if (!pt || !info || i >= pt->n) return sck_err(SCK_ERR_INVALID_ARG, "sck_pt_entry: index %zu out of range", i);
    const pt_entry *e = &pt->e[i];
    memset(info, 0, sizeof *info);
    info->key = e->key;
    info->is_tensor = e->is_tensor;
    info->type = e->type;
    info->text = e->text;
    if (!e->is_tensor) return SCK_OK;
    info->dtype = e->t.dtype;
    info->ndim = e->t.ndim;
    info->nbytes = sck_dtype_size(e->t.dtype);
    for (int d = 0; d < e->t.ndim; d++) {
        info->shape[d] = e->t.size[d];
        info->nbytes *= (uint64_t)e->t.size[d];
    }
    info->storage = e->t.storage_key;
    info->storage_offset = e->t.storage_offset;
    return SCK_OK;
}
