/* ckpt_fixture.c - see ckpt_fixture.h. */
#include "ckpt_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "format/dcp_meta.h"
#include "harness.h"
#include "base/util.h"
#include "io/storage.h"

#define W_ROWS 12
#define W_COLS 10
#define B_LEN 7
#define BLOB_LEN 100
#define MAX_RANKS 16

typedef struct fx_data {
    float w[W_ROWS][W_COLS];
    int64_t b[B_LEN];
    uint16_t m[4][4][3];
    uint8_t blob[BLOB_LEN];
} fx_data;

static fx_data D[2];
static int D_ready;

static void fx_init(void) {
    if (D_ready) return;
    for (int v = 0; v < 2; v++) th_fill(&D[v], sizeof D[v], 100 + (uint64_t)v);
    D_ready = 1;
}

/* Rows [lo, hi) of n-way split of len. */
static void split(int64_t len, int r, int n, int64_t *lo, int64_t *hi) {
    int64_t per = (len + n - 1) / n;
    *lo = per * r < len ? per * r : len;
    *hi = per * (r + 1) < len ? per * (r + 1) : len;
}

typedef struct save_job {
    const char *dir;
    int v;
    unsigned flags;
    int rcs[MAX_RANKS];
    char msgs[MAX_RANKS][512];
} save_job;

static int save_rank(sck_comm *comm, void *arg) {
    save_job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    fx_data *d = &D[j->v];
    int64_t wshape[2] = {W_ROWS, W_COLS}, lo, hi, blo, bhi;
    split(W_ROWS, r, n, &lo, &hi);
    split(B_LEN, r, n, &blo, &bhi);
    int64_t off[2] = {lo, 0}, size[2] = {hi - lo, W_COLS};
    int64_t bshape[1] = {B_LEN}, mshape[3] = {4, 4, 3};
    sck_state *st = sck_state_new();
    int rc = st ? SCK_OK : SCK_ERR_NOMEM;
    if (!rc) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, wshape, off, size, &d->w[0][0] + lo * W_COLS); /* no row: one past the end */
    if (!rc) rc = sck_state_add_flat(st, "model.b", SCK_I64, 1, bshape, blo, bhi - blo, &d->b[blo]);
    if (!rc) rc = sck_state_add_replicated(st, "opt.m", SCK_BF16, 3, mshape, d->m);
    if (!rc) rc = sck_state_add_value(st, "other.step", sck_value_int(1000 + j->v));
    if (!rc && r == 0) rc = sck_state_add_blob(st, "other.rng", d->blob, BLOB_LEN);
    if (!rc) {
        sck_save_opts o;
        memset(&o, 0, sizeof o);
        o.flags = j->flags;
        rc = sck_save(comm, j->dir, st, &o);
    }
    j->rcs[r] = rc;
    snprintf(j->msgs[r], sizeof j->msgs[r], "%s", sck_last_error());
    sck_state_free(st);
    return rc;
}

int fx_save(const char *dir, int nranks, int v, unsigned save_flags, int *rcs, char (*msgs)[512]) {
    fx_init();
    static save_job j;  /* large; tests run one at a time */
    memset(&j, 0, sizeof j);
    j.dir = dir;
    j.v = v;
    j.flags = save_flags;
    sck_threads_run(nranks, save_rank, &j);
    for (int r = 0; r < nranks; r++) {
        if (rcs) rcs[r] = j.rcs[r];
        if (msgs) memcpy(msgs[r], j.msgs[r], sizeof j.msgs[r]);
    }
    if (j.rcs[0]) sck_err_set_raw(j.msgs[0]); /* the caller reads sck_last_error() in this thread */
    return j.rcs[0];
}

/* Which version buffers equal, or -2. */
static int match(const fx_data *got, const sck_value *step, const void *blob, size_t blob_n) {
    for (int v = 0; v < 2; v++) {
        const fx_data *d = &D[v];
        if (!memcmp(got->w, d->w, sizeof d->w) && !memcmp(got->b, d->b, sizeof d->b) && !memcmp(got->m, d->m, sizeof d->m) &&
            step && sck_value_get_int(step) == 1000 + v && blob_n == BLOB_LEN && !memcmp(blob, d->blob, BLOB_LEN))
            return v;
    }
    return -2;
}

int fx_load_version(const char *dir, unsigned load_flags) {
    fx_init();
    fx_data *got = calloc(1, sizeof *got);
    sck_state *st = sck_state_new();
    if (!got || !st) {
        free(got);
        sck_state_free(st);
        return -1;
    }
    int64_t wshape[2] = {W_ROWS, W_COLS}, bshape[1] = {B_LEN}, mshape[3] = {4, 4, 3};
    int rc = sck_state_add_replicated(st, "model.w", SCK_F32, 2, wshape, got->w);
    if (!rc) rc = sck_state_add_replicated(st, "model.b", SCK_I64, 1, bshape, got->b);
    if (!rc) rc = sck_state_add_replicated(st, "opt.m", SCK_BF16, 3, mshape, got->m);
    if (!rc) rc = sck_state_add_value(st, "other.step", NULL);
    if (!rc) rc = sck_state_add_blob(st, "other.rng", NULL, 0);
    sck_load_opts o;
    memset(&o, 0, sizeof o);
    o.flags = load_flags;
    if (!rc) rc = sck_load(NULL, dir, st, &o);
    int v = -1;
    if (!rc) {
        const void *blob = NULL;
        size_t n = 0;
        sck_state_blob(st, "other.rng", &blob, &n);
        v = match(got, sck_state_value(st, "other.step"), blob, n);
    }
    sck_state_free(st);
    free(got);
    return v;
}

typedef struct load_job {
    const char *dir;
    unsigned flags;
    int ok;
} load_job;

/* Each rank loads a column block of model.w (saved as row blocks) and checks it against version 0/1. */
static int load_rank(sck_comm *comm, void *arg) {
    load_job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t lo, hi, wshape[2] = {W_ROWS, W_COLS};
    split(W_COLS, r, n, &lo, &hi);
    int64_t off[2] = {0, lo}, size[2] = {W_ROWS, hi - lo};
    float *buf = calloc((size_t)(W_ROWS * (hi - lo)) + 1, sizeof *buf);
    sck_state *st = sck_state_new();
    int rc = buf && st ? SCK_OK : SCK_ERR_NOMEM;
    if (!rc) rc = sck_state_add_box(st, "model.w", SCK_F32, 2, wshape, off, size, buf);
    sck_load_opts o;
    memset(&o, 0, sizeof o);
    o.flags = j->flags | SCK_LOAD_ALLOW_MISSING;
    if (!rc) rc = sck_load(comm, j->dir, st, &o);
    if (!rc) {
        int same = 0;
        for (int v = 0; v < 2; v++) {
            int eq = 1;
            for (int64_t i = 0; i < W_ROWS && eq; i++)
                eq = !memcmp(&buf[i * (hi - lo)], &D[v].w[i][lo], (size_t)(hi - lo) * sizeof *buf);
            same |= eq;
        }
        if (!same) __atomic_store_n(&j->ok, 0, __ATOMIC_SEQ_CST);
    }
    sck_state_free(st);
    free(buf);
    return rc;
}

int fx_load_resharded(const char *dir, int nranks, unsigned load_flags) {
    fx_init();
    load_job j = {dir, load_flags, 1};
    int rc = sck_threads_run(nranks, load_rank, &j);
    if (!rc && !j.ok) return sck_err(SCK_ERR_MISMATCH, "resharded load returned bytes of neither version");
    return rc;
}

int fx_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

int fx_count_siblings(const char *dir) {
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash) return -1;
    *slash = 0;
    const char *base = slash + 1;
    size_t bl = strlen(base);
    DIR *d = opendir(parent);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, base, bl) && de->d_name[bl] == '.') n++; /* dir.tmp-* / dir.old-* */
    closedir(d);
    return n;
}

unsigned char *fx_read(const char *path, size_t *n) {
    uint8_t *p = NULL;
    if (sck_read_file(path, &p, n)) return NULL;
    return p;
}

int fx_write(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int rc = write(fd, p, n) == (ssize_t)n ? 0 : -1;
    close(fd);
    return rc;
}

int fx_edit_metadata(const char *dir, void (*fn)(struct ck_meta *m, void *ctx), void *ctx) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.metadata", dir);
    size_t n;
    unsigned char *data = fx_read(path, &n);
    if (!data) return SCK_ERR_IO;
    ck_meta m;
    int rc = dcp_meta_decode(data, n, path, &m);
    free(data);
    if (rc) return rc;
    fn(&m, ctx);
    sck_buf b;
    sck_buf_init(&b);
    rc = dcp_meta_encode(&m, &b);
    if (!rc) rc = fx_write(path, b.data, b.len) ? SCK_ERR_IO : SCK_OK;
    sck_buf_free(&b);
    ck_meta_free(&m);
    return rc;
}

int fx_flip(const char *dir, const char *name, uint64_t off, unsigned char mask) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    unsigned char c;
    int rc = pread(fd, &c, 1, (off_t)off) == 1 ? 0 : -1;
    c ^= mask;
    if (!rc) rc = pwrite(fd, &c, 1, (off_t)off) == 1 ? 0 : -1;
    close(fd);
    return rc;
}

int fx_evict(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return 0;
}

int fx_resident(const char *dir, const char *name, uint64_t off) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    off -= off % 4096;
    void *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, (off_t)off);
    close(fd);
    if (m == MAP_FAILED) return -1;
    unsigned char v = 0;
    int rc = mincore(m, 4096, &v) == 0 ? (v & 1) : -1;
    munmap(m, 4096);
    return rc;
}

uint64_t fx_thread_io(const char *field) {
    FILE *f = fopen("/proc/thread-self/io", "r");
    if (!f) return 0;
    char line[128];
    size_t n = strlen(field);
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':' && sscanf(line + n + 1, "%llu", &v) == 1) break;
    fclose(f);
    return v;
}
