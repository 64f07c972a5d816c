/* cmd_convert.c - `shardckpt convert SRC DST --to dcp|safetensors [--ranks N]`. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "shardckpt.h"
#include "safetensors.h"
#include "util.h"

/* ---- to DCP: N thread-ranks each load their dim-0 slice of every tensor, then save ---- */

typedef struct conv_job {
    const char *src, *dst;
    const sck_ckpt *ck;   /* opened once; only read for entry info */
} conv_job;

static int conv_rank(sck_comm *comm, void *arg) {
    conv_job *job = arg;
    int rank = sck_comm_rank(comm), size = sck_comm_size(comm);
    sck_state *st = sck_state_new();
    size_t n = sck_ckpt_count(job->ck);
    void **bufs = calloc(n ? n : 1, sizeof *bufs);
    int rc = st && bufs ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        sck_entry_info e;
        sck_ckpt_entry(job->ck, i, &e);
        if (e.kind == SCK_ENTRY_BYTES) {
            rc = sck_state_add_value(st, e.key, NULL);
            continue;
        }
        if (e.dtype >= SCK_DTYPE_COUNT) {
            rc = sck_err(SCK_ERR_UNSUPPORTED, "'%s': dtype not supported", e.key);
            break;
        }
        if (e.ndim == 0) {
            bufs[i] = malloc(sck_dtype_size(e.dtype));
            rc = bufs[i] ? sck_state_add_replicated(st, e.key, e.dtype, 0, e.shape, bufs[i]) : sck_err(SCK_ERR_NOMEM, "out of memory");
            continue;
        }
        /* torch.chunk along dim 0: ceil(d0 / size) rows per rank; trailing ranks may get none */
        int64_t d0 = e.shape[0], per = (d0 + size - 1) / size;
        int64_t lo = per * rank < d0 ? per * rank : d0, hi = per * (rank + 1) < d0 ? per * (rank + 1) : d0;
        int64_t off[SCK_MAX_DIMS] = {0}, sz[SCK_MAX_DIMS];
        memcpy(sz, e.shape, sizeof sz);
        off[0] = lo;
        sz[0] = hi - lo;
        uint64_t cnt = 1;
        for (int d = 0; d < e.ndim; d++) cnt *= (uint64_t)sz[d];
        bufs[i] = malloc(cnt ? cnt * sck_dtype_size(e.dtype) : 1);
        if (!bufs[i]) {
            rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory for %llu elements", e.key, (unsigned long long)cnt);
            break;
        }
        rc = sck_state_add_box(st, e.key, e.dtype, e.ndim, e.shape, off, sz, bufs[i]);
    }
    /* A local failure must reach every rank before the next collective, or the others would wait forever. */
    rc = sck_comm_agree(comm, rc);
    if (!rc) rc = sck_load(comm, job->src, st, NULL);
    if (!rc) rc = sck_save(comm, job->dst, st, NULL);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    sck_state_free(st);
    return rc;
}

static int to_dcp(const char *src, const char *dst, int ranks) {
    sck_ckpt *ck;
    if (sck_ckpt_open(src, &ck)) return cli_fail();
    conv_job job = {src, dst, ck};
    int rc = sck_threads_run(ranks, conv_rank, &job);
    sck_ckpt_close(ck);
    return rc ? cli_fail() : 0;
}

/* ---- to safetensors: stream one tensor at a time (peak memory = largest tensor) ---- */

static int to_safetensors(const char *src, const char *dst) {
    sck_ckpt *ck;
    if (sck_ckpt_open(src, &ck)) return cli_fail();
    size_t n = sck_ckpt_count(ck);
    st_tensor *t = calloc(n ? n : 1, sizeof *t);
    size_t *idx = calloc(n ? n : 1, sizeof *idx);
    sck_value *md = sck_value_dict();
    sck_buf hdr;
    sck_buf_init(&hdr);
    size_t nt = 0;
    int rc = t && idx && md ? SCK_OK : sck_err(SCK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !rc; i++) {
        sck_entry_info e;
        sck_ckpt_entry(ck, i, &e);
        if (e.kind == SCK_ENTRY_BYTES) {
            /* Non-tensor entries travel in __metadata__ as JSON text (raw bytes as {"__bytes__": hex}). */
            void *raw = NULL;
            size_t rn = 0;
            sck_value *v = NULL;
            rc = sck_ckpt_read_bytes(ck, i, &raw, &rn, &v);
            if (rc) break;
            if (!v) v = sck_value_bytes(raw, rn);
            free(raw);
            char *js = v ? sck_value_to_json(v) : NULL;
            sck_value_free(v);
            if (!js) {
                rc = sck_err(SCK_ERR_NOMEM, "out of memory");
                break;
            }
            rc = sck_value_dict_set(md, e.key, sck_value_string(js));
            free(js);
            continue;
        }
        if (e.dtype >= SCK_DTYPE_COUNT) {
            rc = sck_err(SCK_ERR_UNSUPPORTED, "'%s': dtype not supported by safetensors output", e.key);
            break;
        }
        t[nt].name = (char *)e.key;
        t[nt].dtype = e.dtype;
        t[nt].ndim = e.ndim;
        memcpy(t[nt].shape, e.shape, sizeof t[nt].shape);
        idx[nt++] = i;
    }
    if (!rc) rc = st_build_header(t, nt, sck_value_len(md) ? md : NULL, &hdr);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    int fd = -1;
    if (!rc) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot create", tmp);
    }
    uint64_t pos = 0;
    if (!rc) {
        rc = sck_pwrite_full(fd, hdr.data, hdr.len, 0, tmp);
        pos = hdr.len;
    }
    for (size_t k = 0; k < nt && !rc; k++) {
        uint64_t len = t[k].end - t[k].begin;
        void *buf = malloc(len ? len : 1);
        if (!buf) {
            rc = sck_err(SCK_ERR_NOMEM, "'%s': out of memory for %llu bytes", t[k].name, (unsigned long long)len);
            break;
        }
        rc = sck_ckpt_read_box(ck, idx[k], NULL, NULL, buf);
        if (!rc) rc = sck_pwrite_full(fd, buf, len, pos, tmp);
        pos += len;
        free(buf);
    }
    if (fd >= 0) {
        if (!rc && fsync(fd) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: fsync failed", tmp);
        if (close(fd) != 0 && !rc) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: close failed", tmp);
        if (!rc && rename(tmp, dst) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", tmp, dst);
        if (rc) unlink(tmp);
    }
    sck_buf_free(&hdr);
    sck_value_free(md);
    free(t);
    free(idx);
    sck_ckpt_close(ck);
    return rc ? cli_fail() : 0;
}

int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *dst = NULL, *to = NULL;
    int ranks = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: shardckpt convert SRC DST --to dcp [--ranks N]\n"
                   "       shardckpt convert SRC DST --to safetensors\n"
                   "SRC: a DCP directory, a .safetensors file, or a Hugging Face sharded directory.\n"
                   "--to dcp: DST is written as N ranks (threads) would save it, every tensor split along dim 0\n"
                   "          (torch.chunk: ceil(rows/N) rows per rank); non-tensor entries are kept.\n"
                   "--to safetensors: DST is one file with every tensor in full; non-tensor entries are stored\n"
                   "          in __metadata__ as JSON text.\n");
            return 0;
        } else if (!strcmp(argv[i], "--to") && i + 1 < argc) {
            to = argv[++i];
        } else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 4096) {
                fprintf(stderr, "shardckpt: --ranks wants an integer 1..4096, got '%s'\n", argv[i]);
                return 2;
            }
            ranks = (int)v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "shardckpt: convert: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!src) {
            src = argv[i];
        } else if (!dst) {
            dst = argv[i];
        } else {
            fprintf(stderr, "shardckpt: convert: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!src || !dst || !to) {
        fprintf(stderr, "usage: shardckpt convert SRC DST --to dcp|safetensors [--ranks N]\n");
        return 2;
    }
    if (!strcmp(to, "dcp")) return to_dcp(src, dst, ranks);
    if (!strcmp(to, "safetensors")) return to_safetensors(src, dst);
    fprintf(stderr, "shardckpt: convert: --to must be dcp or safetensors, not '%s'\n", to);
    return 2;
}
