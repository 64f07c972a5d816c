/* fuzz_ckpt.c - libFuzzer target for a whole checkpoint: the input becomes a DCP directory, which is
 * opened, verified, read entry by entry (whole tensors and a sub-box) and loaded with sck_load.
 *
 * Input: `.metadata`, then each data file, separated by the 8 bytes "SCKFUZZ/"; the data files are
 * named __0_0.distcp, __1_0.distcp, ... in order.  fuzz/make_seeds.sh packs real checkpoints this way.
 * Any outcome but a crash, a hang, a leak or a sanitizer report is fine.
 * Build: make fuzz (see the Makefile); run: build/fuzz/fuzz_ckpt -max_total_time=60 fuzz/corpus/ckpt */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shardckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "SCKFUZZ/"
#define MAX_FILES 8
#define MAX_READ (16u << 20)   /* bytes read per tensor: keeps huge declared shapes cheap */

static char g_dir[256];

static void write_file(const char *name, const uint8_t *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void remove_files(void) {
    char name[512];
    for (int k = 0; k < MAX_FILES; k++) {
        snprintf(name, sizeof name, "%s/__%d_0.distcp", g_dir, k);
        unlink(name);
    }
}

static void remove_dir(void) {
    char name[512];
    remove_files();
    snprintf(name, sizeof name, "%s/.metadata", g_dir);
    unlink(name);
    rmdir(g_dir);
}

static void build_dir(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_dir, sizeof g_dir, "%s/fuzz_ckpt.%d", base, (int)getpid());
        mkdir(g_dir, 0755);
        atexit(remove_dir);
    }
    char name[32];
    remove_files();
    const uint8_t *p = data, *end = data + size;
    for (int k = -1; k < MAX_FILES; k++) {
        const uint8_t *q = memmem(p, (size_t)(end - p), SEP, 8);
        size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
        if (k < 0) write_file(".metadata", p, n);
        else {
            snprintf(name, sizeof name, "__%d_0.distcp", k);
            write_file(name, p, n);
        }
        if (!q) break;
        p = q + 8;
    }
}

static void read_entries(sck_ckpt *ck) {
    size_t n = sck_ckpt_count(ck);
    for (size_t i = 0; i < n && i < 64; i++) {
        sck_entry_info e;
        if (sck_ckpt_entry(ck, i, &e)) __builtin_trap(); /* in range: must succeed */
        if (e.kind == SCK_ENTRY_BYTES) {
            void *raw = NULL;
            size_t len = 0;
            sck_value *v = NULL;
            if (sck_ckpt_read_bytes(ck, i, &raw, &len, &v) == SCK_OK) {
                char *j = v ? sck_value_to_json(v) : NULL;
                free(j);
            }
            free(raw);
            sck_value_free(v);
            continue;
        }
        for (size_t c = 0; c < e.nchunks && c < 16; c++) {
            sck_chunk_info ci;
            if (sck_ckpt_chunk(ck, i, c, &ci)) __builtin_trap();
        }
        size_t elem = sck_dtype_size(e.dtype);
        if (e.nbytes == 0 || e.nbytes > MAX_READ || elem == 0) continue;
        void *buf = malloc((size_t)e.nbytes);
        if (!buf) continue;
        sck_ckpt_read_box(ck, i, NULL, NULL, buf);
        /* the upper half along dim 0: a resharded read */
        if (e.ndim > 0 && e.shape[0] > 1) {
            int64_t off[SCK_MAX_DIMS] = {0}, sz[SCK_MAX_DIMS];
            memcpy(sz, e.shape, sizeof sz);
            off[0] = e.shape[0] / 2;
            sz[0] = e.shape[0] - off[0];
            sck_ckpt_read_box(ck, i, off, sz, buf);
        }
        free(buf);
    }
}

/* sck_load of every tensor (whole, replicated) and byte entry the checkpoint lists. */
static void load_all(sck_ckpt *ck) {
    sck_state *st = sck_state_new();
    if (!st) return;
    size_t n = sck_ckpt_count(ck), total = 0;
    void *bufs[64];
    size_t nb = 0;
    for (size_t i = 0; i < n && nb < 64; i++) {
        sck_entry_info e;
        sck_ckpt_entry(ck, i, &e);
        if (e.kind == SCK_ENTRY_BYTES) {
            sck_state_add_blob(st, e.key, NULL, 0);
            continue;
        }
        if (e.dtype >= SCK_DTYPE_COUNT || e.nbytes > MAX_READ || total + e.nbytes > MAX_READ) continue;
        void *b = malloc(e.nbytes ? (size_t)e.nbytes : 1);
        if (!b) continue;
        bufs[nb++] = b;
        total += (size_t)e.nbytes;
        sck_state_add_replicated(st, e.key, e.dtype, e.ndim, e.shape, b);
    }
    sck_load_opts o;
    memset(&o, 0, sizeof o);
    o.flags = SCK_LOAD_ALLOW_MISSING;
    sck_load(NULL, g_dir, st, &o);
    sck_state_free(st);
    for (size_t i = 0; i < nb; i++) free(bufs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    build_dir(data, size);
    sck_ckpt *ck = NULL;
    if (sck_ckpt_open(g_dir, &ck) != SCK_OK) {
        if (ck || !sck_last_error()[0]) __builtin_trap(); /* failures leave nothing and say why */
        return 0;
    }
    sck_verify_stats vs;
    sck_ckpt_verify(ck, &vs);
    read_entries(ck);
    load_all(ck);
    sck_ckpt_close(ck);
    return 0;
}
