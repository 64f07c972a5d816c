/* st_out.c - layout and commit of consolidated safetensors output (see st_out.h). */
#include "format/st_out.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/st_meta.h"
#include "io/fileio.h"
#include "base/json.h"
#include "io/storage.h"

void st_layout_free(st_layout *L) {
    if (!L) return;
    for (size_t i = 0; i < L->nfiles; i++) {
        free(L->files[i].name);
        sck_buf_free(&L->files[i].header);
    }
    for (size_t i = 0; i < L->n && L->names; i++) free(L->names[i]);
    free(L->names);
    free(L->files);
    free(L->file_of);
    free(L->data_off);
    free(L->nbytes);
    free(L->path);
    memset(L, 0, sizeof *L);
}

/* __metadata__ of file `fi`: the format tag (md's "format", else "pt") everywhere, the rest of md
 * in the first file. */
static int file_metadata(const sck_value *md, size_t fi, sck_value **out) {
    const sck_value *tag = sck_value_dict_get(md, ST_FORMAT_KEY);
    sck_value *fm = sck_value_dict();
    int rc = fm ? sck_value_dict_set(fm, ST_FORMAT_KEY, tag ? sck_value_clone(tag) : sck_value_string(ST_FORMAT_PT))
                : SCK_ERR_NOMEM;
    for (size_t i = 0; fi == 0 && md && i < sck_value_len(md) && !rc; i++) {
        const sck_value *v = sck_value_at(md, i);
        if (v != tag) rc = sck_value_dict_set(fm, sck_value_key_at(md, i), sck_value_clone(v));
    }
    if (rc) {
        sck_value_free(fm);
        return sck_err(SCK_ERR_NOMEM, "safetensors: out of memory building __metadata__");
    }
    *out = fm;
    return SCK_OK;
}

static int tensor_bytes(const st_tensor *t, uint64_t *out) {
    uint64_t numel;
    if (sck_dtype_size(t->dtype) == 0 || t->ndim < 0 || t->ndim > SCK_MAX_DIMS || sck_numel(t->ndim, t->shape, &numel) ||
        sck_mul_overflow_u64(numel, sck_dtype_size(t->dtype), out))
        return sck_err(SCK_ERR_INVALID_ARG, "safetensors: tensor \"%.200s\" has a bad dtype or shape", t->name ? t->name : "?");
    return SCK_OK;
}

/* Builds file fi's header from the tensors assigned to it and records their absolute offsets. */
static int build_file(st_layout *L, const st_tensor *t, size_t fi, const sck_value *values) {
    size_t cnt = 0;
    for (size_t i = 0; i < L->n; i++) cnt += L->file_of[i] == fi;
    st_tensor *sub = calloc(cnt ? cnt : 1, sizeof *sub);
    size_t *idx = calloc(cnt ? cnt : 1, sizeof *idx);
    sck_value *md = NULL;
    int rc = sub && idx ? file_metadata(values, fi, &md) : sck_err(SCK_ERR_NOMEM, "safetensors: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < L->n && !rc; i++) {
        if (L->file_of[i] != fi) continue;
        sub[k] = t[i];
        idx[k++] = i;
    }
    if (!rc) rc = st_build_header(sub, cnt, md, &L->files[fi].header);
    for (size_t j = 0; j < cnt && !rc; j++) L->data_off[idx[j]] = L->files[fi].header.len + sub[j].begin;
    if (!rc) L->files[fi].size = L->files[fi].header.len + (cnt ? sub[cnt - 1].end : 0);
    sck_value_free(md);
    free(sub);
    free(idx);
    return rc;
}

int st_layout_build(const st_tensor *t, size_t n, const sck_value *values, int hf, uint64_t max_shard, const char *path,
                    st_layout *L) {
    memset(L, 0, sizeof *L);
    if (!path || !*path || (n && !t)) return sck_err(SCK_ERR_INVALID_ARG, "safetensors: NULL path or tensors");
    const sck_value *tag = sck_value_dict_get(values, ST_FORMAT_KEY);
    if (tag && sck_value_kind_of(tag) != SCK_VAL_STRING)
        return sck_err(SCK_ERR_INVALID_ARG, "safetensors: the key '%s' is reserved in __metadata__ for the format tag (a string)",
                       ST_FORMAT_KEY);
    if (!max_shard) max_shard = ST_HF_DEFAULT_SHARD;
    L->hf = hf;
    L->n = n;
    L->path = sck_strdup(path);
    L->names = calloc(n ? n : 1, sizeof *L->names);
    L->file_of = calloc(n ? n : 1, sizeof *L->file_of);
    L->data_off = calloc(n ? n : 1, sizeof *L->data_off);
    L->nbytes = calloc(n ? n : 1, sizeof *L->nbytes);
    if (!L->path || !L->names || !L->file_of || !L->data_off || !L->nbytes) goto oom;
    /* Assign files: greedy in the given order, capped by tensor bytes (headers not counted, as in HF). */
    uint64_t cur = 0;
    uint32_t nf = 1;
    int rc;
    for (size_t i = 0; i < n; i++) {
        if ((rc = tensor_bytes(&t[i], &L->nbytes[i]))) goto fail;
        if (!(L->names[i] = sck_strdup(t[i].name ? t[i].name : ""))) goto oom;
        if (hf && cur > 0 && L->nbytes[i] > max_shard - (cur < max_shard ? cur : max_shard)) {
            nf++;
            cur = 0;
        }
        L->file_of[i] = nf - 1;
        cur += L->nbytes[i];
        L->total_size += L->nbytes[i];
    }
    if (hf && nf > 99999) {
        rc = sck_err(SCK_ERR_INVALID_ARG, "%s: %u shards exceed the 5-digit HF naming; raise the max shard size", path, nf);
        goto fail;
    }
    L->nfiles = nf;
    L->files = calloc(nf, sizeof *L->files);
    if (!L->files) goto oom;
    for (uint32_t f = 0; f < nf; f++) {
        char name[64];
        if (hf) snprintf(name, sizeof name, "model-%05u-of-%05u.safetensors", f + 1, nf);
        if (!(L->files[f].name = sck_strdup(hf ? name : path))) goto oom;
        if ((rc = build_file(L, t, f, values))) goto fail;
    }
    return SCK_OK;
oom:
    rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory laying out the safetensors output", path);
fail:
    st_layout_free(L);
    return rc;
}

int st_out_path(const st_layout *L, size_t i, int tmp, char *buf, size_t cap) {
    int k = L->hf ? snprintf(buf, cap, "%s/%s%s", L->path, L->files[i].name, tmp ? ".tmp" : "")
                  : snprintf(buf, cap, "%s%s", L->files[i].name, tmp ? ".tmp" : "");
    if (k < 0 || (size_t)k >= cap) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", L->path);
    return SCK_OK;
}

void st_out_abort(const st_layout *L) {
    char p[4096];
    for (size_t i = 0; i < L->nfiles; i++)
        if (st_out_path(L, i, 1, p, sizeof p) == SCK_OK) io_unlink(p);
}

int st_out_begin(const st_layout *L) {
    char p[4096];
    int rc = SCK_OK;
    /* An old HF index stays until st_out_commit: while the new files are written the old export is whole. */
    if (L->hf && (rc = ensure_dir(L->path))) return rc;
    for (size_t i = 0; i < L->nfiles && !rc; i++) {
        if ((rc = st_out_path(L, i, 1, p, sizeof p))) break;
        int fd = io_open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot create", p);
            break;
        }
        const st_out_file *f = &L->files[i];
        rc = sck_pwrite_full(fd, f->header.data, f->header.len, 0, p);
        if (!rc && ftruncate(fd, (off_t)f->size) != 0)
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot size to %llu bytes", p, (unsigned long long)f->size);
        if (io_close(fd, p) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", p);
    }
    if (rc) st_out_abort(L);
    return rc;
}

int st_out_open(const st_layout *L, size_t i, int *fd) {
    char p[4096];
    int rc = st_out_path(L, i, 1, p, sizeof p);
    if (rc) return rc;
    *fd = io_open(p, O_WRONLY | O_CLOEXEC, 0);
    if (*fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open for writing", p);
    return SCK_OK;
}

typedef struct name_ref {
    const char *name;
    size_t i;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

int st_index_json(const st_layout *L, sck_buf *out) {
    name_ref *ord = malloc((L->n ? L->n : 1) * sizeof *ord);
    if (!ord) return sck_err(SCK_ERR_NOMEM, "%s: out of memory for the index", L->path);
    for (size_t i = 0; i < L->n; i++) ord[i] = (name_ref){L->names[i], i};
    qsort(ord, L->n, sizeof *ord, cmp_name_ref);
    int rc = sck_buf_printf(out, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
                            (unsigned long long)L->total_size);
    for (size_t k = 0; k < L->n && !rc; k++) {
        size_t i = ord[k].i;
        rc = sck_buf_printf(out, "%s\n    ", k ? "," : "");
        if (!rc) rc = sck_json_put_string(out, L->names[i], strlen(L->names[i]));
        if (!rc) rc = sck_buf_printf(out, ": \"%s\"", L->files[L->file_of[i]].name);
    }
    if (!rc) rc = sck_buf_printf(out, "%s}\n}\n", L->n ? "\n  " : "");
    free(ord);
    return rc ? sck_err(SCK_ERR_NOMEM, "%s: out of memory for the index", L->path) : SCK_OK;
}

/* "model-00003-of-00007.safetensors" -> 1 (and the total in *of). */
static int is_shard_name(const char *s, unsigned *of) {
    unsigned k, n;
    int used = 0;
    if (strlen(s) != strlen("model-00000-of-00000.safetensors")) return 0;
    if (sscanf(s, "model-%5u-of-%5u.safetensors%n", &k, &n, &used) != 2 || used != (int)strlen(s)) return 0;
    for (int i = 6; i < 11; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    *of = n;
    return 1;
}

/* Shards of an earlier save with another shard count are not in the new index: remove them, as
 * transformers' save_pretrained does, so the directory holds one model. */
static void remove_stale_shards(const st_layout *L) {
    DIR *d = opendir(L->path);
    if (!d) return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        unsigned of;
        if (!is_shard_name(de->d_name, &of) || of == L->nfiles) continue;
        int k = snprintf(p, sizeof p, "%s/%s", L->path, de->d_name);
        if (k > 0 && (size_t)k < sizeof p) io_unlink(p);
    }
    closedir(d);
}

/* The index is the commit marker: written under a temporary name, synced, then renamed into place. */
static int write_index(const char *dir, const sck_buf *idx, int do_fsync) {
    char tmp[4096], dst[4096];
    int k1 = snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, ST_HF_INDEX), k2 = snprintf(dst, sizeof dst, "%s/%s", dir, ST_HF_INDEX);
    if (k1 < 0 || k2 < 0 || (size_t)k1 >= sizeof tmp || (size_t)k2 >= sizeof dst)
        return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    int fd = io_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot create", tmp);
    int rc = sck_pwrite_full(fd, idx->data, idx->len, 0, tmp);
    if (!rc && do_fsync && io_fsync(fd, tmp) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", tmp);
    if (io_close(fd, tmp) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", tmp);
    if (!rc && io_rename(tmp, dst) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", tmp, dst);
    if (rc) {
        io_unlink(tmp);
        return rc;
    }
    return do_fsync ? fsync_dir(dir) : SCK_OK;
}

/* A new shard about to replace a file of the same name (the old export's shard, when the shard count is
 * unchanged) would leave the old index naming a mix of old and new shards: the old index goes first, so
 * that a crash during the renames leaves no index rather than a wrong one.  Shards of another count get
 * other names; then the old index stays whole until the new one replaces it in one rename. */
static int drop_index_if_overwriting(const st_layout *L, int do_fsync) {
    char p[4096];
    struct stat sb;
    int overwrites = 0;
    for (size_t i = 0; i < L->nfiles && !overwrites; i++) {
        int rc = st_out_path(L, i, 0, p, sizeof p);
        if (rc) return rc;
        overwrites = io_lstat(p, &sb) == 0;
    }
    if (!overwrites) return SCK_OK;
    int k = snprintf(p, sizeof p, "%s/%s", L->path, ST_HF_INDEX);
    if (k < 0 || (size_t)k >= sizeof p) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", L->path);
    if (io_unlink(p) != 0) {
        if (errno == ENOENT) return SCK_OK;
        return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot remove the old index", p);
    }
    return do_fsync ? fsync_dir(L->path) : SCK_OK;
}

int st_out_commit(const st_layout *L, int do_fsync) {
    char tmp[4096], dst[4096];
    int rc = SCK_OK;
    for (size_t i = 0; i < L->nfiles && do_fsync && !rc; i++) {
        if ((rc = st_out_path(L, i, 1, tmp, sizeof tmp))) break;
        int fd = io_open(tmp, O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open", tmp);
        else {
            if (io_fsync(fd, tmp) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", tmp);
            if (io_close(fd, tmp) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", tmp);
        }
    }
    if (!rc && L->hf) rc = drop_index_if_overwriting(L, do_fsync);
    for (size_t i = 0; i < L->nfiles && !rc; i++) {
        if ((rc = st_out_path(L, i, 1, tmp, sizeof tmp)) || (rc = st_out_path(L, i, 0, dst, sizeof dst))) break;
        if (io_rename(tmp, dst) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", tmp, dst);
    }
    if (rc) {
        st_out_abort(L);
        return rc;
    }
    if (!L->hf) {
        if (do_fsync) {
            snprintf(tmp, sizeof tmp, "%s", L->path);
            char *slash = strrchr(tmp, '/');
            if (slash == tmp) slash[1] = 0;
            else if (slash) *slash = 0;
            else snprintf(tmp, sizeof tmp, ".");
            rc = fsync_dir(tmp);
        }
        return rc;
    }
    if (do_fsync && (rc = fsync_dir(L->path))) return rc;
    sck_buf idx;
    sck_buf_init(&idx);
    rc = st_index_json(L, &idx);
    if (!rc) rc = write_index(L->path, &idx, do_fsync);
    sck_buf_free(&idx);
    if (!rc) remove_stale_shards(L);
    return rc;
}

int sck_parse_size(const char *s, uint64_t *out) {
    if (!s || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_parse_size: NULL argument");
    char *end;
    errno = 0;
    double v = *s ? strtod(s, &end) : 0;
    if (!*s || errno || end == s || !(v > 0) || !isfinite(v)) goto bad;
    static const struct { const char *unit; double mul; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0},
        {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit)) continue;
        double b = v * units[i].mul;
        if (b < 1 || b >= 1.8e19) goto bad;
        *out = (uint64_t)b;
        return SCK_OK;
    }
bad:
    return sck_err(SCK_ERR_INVALID_ARG, "'%s' is not a size such as 5GB, 500MB or 2GiB", s);
}
