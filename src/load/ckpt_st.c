/* ckpt_st.c - safetensors files (single file, or a Hugging Face sharded directory with
 * model.safetensors.index.json) opened as checkpoints: each tensor is one raw chunk. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "load/ckpt.h"
#include "format/safetensors.h"
#include "io/storage.h"

/* Reads and parses the header of dir/name, adding its tensors to m. */
static int add_st_file(ck_meta *m, const char *dir, const char *name) {
    char path[4096];
    int k = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= sizeof path) return sck_err(SCK_ERR_INVALID_ARG, "%s: path too long", dir);
    st_header h;
    int rc = st_read_header_file(path, &h);
    uint32_t fi;
    if (!rc) rc = ck_meta_file(m, name, &fi);
    for (size_t i = 0; i < h.n && !rc; i++) {
        const st_tensor *t = &h.t[i];
        ck_entry *e;
        if ((rc = ck_meta_add(m, t->name, &e))) break;
        e->dtype = (int)t->dtype;
        snprintf(e->dtype_name, sizeof e->dtype_name, "%s", sck_dtype_name(t->dtype));
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof e->shape);
        ck_chunk c;
        memset(&c, 0, sizeof c);
        static const int64_t zeros[SCK_MAX_DIMS];
        c.file = fi;
        c.offset = h.data_start + t->begin;
        c.length = t->end - t->begin;
        c.raw = 1;
        rc = ck_entry_add_chunk(e, &c, zeros, t->shape);
    }
    st_header_free(&h);
    return rc;
}

static int open_index(const char *dir, ck_meta *m) {
    sck_value *idx;
    const sck_value *wm;
    int rc = st_read_index(dir, &idx, &wm);
    if (rc) return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    /* Each distinct file once; then check that every mapped tensor is in the file it names. */
    for (size_t i = 0; i < sck_value_len(wm) && !rc; i++) {
        const char *fname = sck_value_get_string(sck_value_at(wm, i), NULL);
        int seen = 0;
        for (size_t j = 0; j < m->nfiles && !seen; j++) seen = !strcmp(m->files[j], fname);
        if (!seen) rc = add_st_file(m, dir, fname);
    }
    if (!rc) rc = ck_meta_finish(m, path);
    for (size_t i = 0; i < sck_value_len(wm) && !rc; i++) {
        const char *key = sck_value_key_at(wm, i);
        long ei = ck_meta_find(m, key);
        const char *fname = sck_value_get_string(sck_value_at(wm, i), NULL);
        if (ei < 0 || strcmp(m->files[m->e[ei].chunks[0].file], fname))
            rc = sck_err(SCK_ERR_FORMAT, "%s: weight_map says '%s' is in %s, but it is not there", path, key, fname);
    }
    sck_value_free(idx);
    return rc;
}

int ckpt_open_safetensors(const char *path, sck_ckpt **out) {
    ck_meta m;
    memset(&m, 0, sizeof m);
    struct stat sb;
    if (io_stat(path, &sb) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open", path);
    int rc;
    char dirbuf[4096];
    const char *dir;
    if (S_ISDIR(sb.st_mode)) {
        dir = path;
        rc = open_index(path, &m);
    } else {
        snprintf(dirbuf, sizeof dirbuf, "%s", path);
        char namebuf[4096];
        snprintf(namebuf, sizeof namebuf, "%s", path);
        dir = dirname(dirbuf);
        rc = add_st_file(&m, dir, basename(namebuf));
        if (!rc) rc = ck_meta_finish(&m, path);
    }
    if (rc) {
        ck_meta_free(&m);
        return rc;
    }
    rc = ckpt_from_model(dir, &m, 0, out);
    /* the Hugging Face cache links each snapshot's files to its blobs: a safetensors file named by the
     * caller or its index may be a link (a DCP directory's data files may not) */
    if (!rc) (*out)->files_may_link = 1;
    return rc;
}
