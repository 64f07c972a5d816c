/* st_values.c - reading safetensors headers from files, and the non-tensor entries a full save keeps
 * in __metadata__ (st_meta.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/advanced.h"
#include "base/json.h"
#include "format/safetensors.h"
#include "format/st_meta.h"
#include "format/st_out.h"
#include "io/storage.h"

int st_read_header_file(const char *path, st_header *out) {
    memset(out, 0, sizeof *out);
    int fd = io_open_read(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused, not waited on */
    if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open", path);
    struct stat sb;
    uint8_t head[8], *buf = NULL;
    int rc;
    if (fstat(fd, &sb) != 0) {
        rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot stat", path);
        goto out;
    }
    uint64_t fsize = (uint64_t)sb.st_size, need = 0;
    if (fsize < 8) {
        rc = st_parse_header(head, 0, fsize, path, out, &need);  /* reports the short file */
        goto out;
    }
    if ((rc = sck_pread_full(fd, head, 8, 0, path))) goto out;
    rc = st_parse_header(head, 8, fsize, path, out, &need);
    if (rc != 1) goto out;
    if (!(buf = malloc((size_t)need))) {
        rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)need);
        goto out;
    }
    if ((rc = sck_pread_full(fd, buf, (size_t)need, 0, path))) goto out;
    rc = st_parse_header(buf, (size_t)need, fsize, path, out, &need);
    if (rc == 1) rc = sck_err(SCK_ERR_FORMAT, "%s: header incomplete", path);
out:
    free(buf);
    io_close_quiet(fd, path);
    return rc;
}

/* Adds the values of one file's __metadata__ to dict `out` (keys already there win). */
static int add_file_values(const char *path, sck_value *out) {
    st_header h;
    int rc = st_read_header_file(path, &h);
    if (!rc) rc = st_meta_values(h.metadata, path, out);
    st_header_free(&h);
    return rc;
}

int st_read_index(const char *dir, sck_value **idx_out, const sck_value **wm_out) {
    *idx_out = NULL;
    *wm_out = NULL;
    char p[4096];
    int k = snprintf(p, sizeof p, "%s/%s", dir, ST_HF_INDEX);
    if (k < 0 || (size_t)k >= sizeof p) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    uint8_t *text;
    size_t n;
    int rc = sck_read_file(p, &text, &n);
    if (rc) return rc;
    sck_value *idx = NULL;
    rc = sck_value_from_json((const char *)text, n, &idx);
    free(text);
    if (rc) return sck_err_wrap(rc, "%s", p);
    const sck_value *wm = sck_value_dict_get(idx, "weight_map");
    if (!wm || sck_value_kind_of(wm) != SCK_VAL_DICT) rc = sck_err(SCK_ERR_FORMAT, "%s: no weight_map object", p);
    for (size_t i = 0; !rc && i < sck_value_len(wm); i++) {
        const sck_value *f = sck_value_at(wm, i);
        const char *name = sck_value_kind_of(f) == SCK_VAL_STRING ? sck_value_get_string(f, NULL) : NULL;
        if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
            rc = sck_err(SCK_ERR_FORMAT, "%s: weight_map['%s'] is not a plain file name", p, sck_value_key_at(wm, i));
    }
    if (rc) {
        sck_value_free(idx);
        return rc;
    }
    *idx_out = idx;
    *wm_out = wm;
    return SCK_OK;
}

static int add_index_values(const char *dir, sck_value *out) {
    sck_value *idx;
    const sck_value *wm;
    int rc = st_read_index(dir, &idx, &wm);
    if (rc) return rc;
    /* Files in the order they first appear, each once. */
    for (size_t i = 0; !rc && i < sck_value_len(wm); i++) {
        const char *f = sck_value_get_string(sck_value_at(wm, i), NULL);
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = !strcmp(f, sck_value_get_string(sck_value_at(wm, j), NULL));
        if (seen) continue;
        char fp[4096];
        int k = snprintf(fp, sizeof fp, "%s/%s", dir, f);
        rc = k < 0 || (size_t)k >= sizeof fp ? sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir) : add_file_values(fp, out);
    }
    /* no tensors: a full save still wrote one shard, holding the values */
    if (!rc && sck_value_len(wm) == 0) {
        char fp[4096];
        snprintf(fp, sizeof fp, "%s/model-00001-of-00001.safetensors", dir);
        if (access(fp, F_OK) == 0) rc = add_file_values(fp, out);
    }
    sck_value_free(idx);
    return rc;
}

int st_read_values(const char *path, sck_value **out) {
    *out = NULL;
    struct stat sb;
    if (io_stat(path, &sb) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open", path);
    sck_value *d = sck_value_dict();
    if (!d) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", path);
    int rc = S_ISDIR(sb.st_mode) ? add_index_values(path, d) : add_file_values(path, d);
    if (rc) {
        sck_value_free(d);
        return rc;
    }
    *out = d;
    return SCK_OK;
}

int sck_safetensors_values(const char *path, sck_value **out) {
    if (out) *out = NULL;
    if (!path || !out) return sck_err(SCK_ERR_INVALID_ARG, "sck_safetensors_values: NULL argument");
    return st_read_values(path, out);
}
