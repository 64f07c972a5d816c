/* raw_io.c - the baseline: plain pwrite/pread of the same bytes with the same number of streams
 * (one thread and one file per stream), buffered I/O, fsync on write like shardckpt's default. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

typedef struct stream {
    const layout *L;
    uint8_t *mem;
    int r, n;             /* this stream and how many */
    int nfiles;           /* raw_read_split: files written by raw_write */
    const char *dir;
    int mode;             /* 0 write, 1 read same, 2 read split, 3 read a checkpoint's data files */
    int direct;           /* O_DIRECT (block-aligned layouts only) */
    int failed;
} stream;

#define MAX_IO (1u << 30) /* Linux moves at most ~2 GiB per call; keep calls at 1 GiB */

static int io_full(int fd, uint8_t *p, uint64_t n, uint64_t off, int wr) {
    while (n > 0) {
        size_t k = n > MAX_IO ? MAX_IO : (size_t)n;
        ssize_t got = wr ? pwrite(fd, p, k, (off_t)off) : pread(fd, p, k, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        off += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return 0;
}

static void file_name(char *buf, size_t cap, const char *dir, int r) { snprintf(buf, cap, "%s/raw_%d.bin", dir, r); }

/* Size of the file stream r of n writes. */
static uint64_t file_bytes(const layout *L, int n, int r) {
    int64_t lo, hi;
    split_range(L->rows, n, r, &lo, &hi);
    return (uint64_t)(hi - lo) * (uint64_t)L->cols * 4 * (uint64_t)L->ntensors;
}

static int do_same(stream *s) {
    const layout *L = s->L;
    char path[4096];
    file_name(path, sizeof path, s->dir, s->r);
    int dflag = s->direct ? O_DIRECT : 0;
    int fd = s->mode == 0 ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | dflag, 0644) : open(path, O_RDONLY | O_CLOEXEC | dflag);
    if (fd < 0) return -1;
    int64_t lo, hi;
    split_range(L->rows, s->n, s->r, &lo, &hi);
    uint64_t blk = (uint64_t)(hi - lo) * (uint64_t)L->cols * 4, off = 0;
    int rc = 0;
    for (int t = 0; t < L->ntensors && !rc; t++, off += blk)
        rc = io_full(fd, s->mem + (uint64_t)t * L->tensor_bytes + (uint64_t)lo * (uint64_t)L->cols * 4, blk, off, s->mode == 0);
    if (!rc && s->mode == 0) rc = fsync(fd);
    if (close(fd) != 0) rc = -1;
    return rc;
}

/* Stream r reads bytes [T*r/n, T*(r+1)/n) of the concatenated files into the same flat offsets of mem. */
static int do_split(stream *s) {
    const layout *L = s->L;
    uint64_t T = L->bytes, lo = T * (uint64_t)s->r / (uint64_t)s->n, hi = T * (uint64_t)(s->r + 1) / (uint64_t)s->n;
    uint64_t base = 0;
    for (int f = 0; f < s->nfiles && lo < hi; f++) {
        uint64_t fb = file_bytes(L, s->nfiles, f);
        if (lo < base + fb) {
            uint64_t a = lo - base, len = (hi < base + fb ? hi : base + fb) - lo;
            char path[4096];
            file_name(path, sizeof path, s->dir, f);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) return -1;
            int rc = io_full(fd, s->mem + lo, len, a, 0);
            close(fd);
            if (rc) return rc;
            lo += len;
        }
        base += fb;
    }
    return 0;
}

#define FILE_CHUNK (8u << 20)

/* Stream r reads dir/__r_0.distcp, the data file shardckpt's rank r wrote, whole, 8 MiB at a time. */
static int do_ckpt_file(stream *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/__%d_0.distcp", s->dir, s->r);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t *buf = malloc(FILE_CHUNK);
    struct stat sb;
    int rc = fd >= 0 && buf && fstat(fd, &sb) == 0 ? 0 : -1;
    for (uint64_t off = 0, size = rc ? 0 : (uint64_t)sb.st_size; !rc && off < size; off += FILE_CHUNK)
        rc = io_full(fd, buf, size - off < FILE_CHUNK ? size - off : FILE_CHUNK, off, 0);
    if (fd >= 0) close(fd);
    free(buf);
    return rc;
}

static void *stream_main(void *arg) {
    stream *s = arg;
    s->failed = (s->mode == 3 ? do_ckpt_file(s) : s->mode == 2 ? do_split(s) : do_same(s)) != 0;
    return NULL;
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 || fsync(fd) != 0 ? -1 : 0;
    if (fd >= 0) close(fd);
    return rc;
}

static double run_streams(const layout *L, uint8_t *mem, int n, int nfiles, const char *dir, int mode, int direct) {
    stream *s = calloc((size_t)n, sizeof *s);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!s || !th) {
        free(s);
        free(th);
        return -1;
    }
    /* A write creates its directory in the timed part and ends with it durable in its parent, as any
     * writer of a new checkpoint directory must (shardckpt creates its temporary directory, then
     * fsyncs it and, after the rename, the parent: leaving the mkdir untimed or the parent unsynced
     * would hide 1 ms or more of cold metadata reads after the page cache is dropped). */
    double t0 = now_s();
    if (mode == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        free(s);
        free(th);
        return -1;
    }
    int started = 0, failed = 0;
    for (int r = 0; r < n; r++) {
        s[r] = (stream){L, mem, r, n, nfiles, dir, mode, direct, 0};
        if (pthread_create(&th[r], NULL, stream_main, &s[r]) != 0) {
            failed = 1;
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++) {
        pthread_join(th[r], NULL);
        failed |= s[r].failed;
    }
    if (mode == 0 && !failed) { /* like shardckpt: the files' entries are durable, and the directory's */
        failed = fsync_dir(dir) != 0;
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", dir);
        char *slash = strrchr(parent, '/');
        if (slash == parent) slash[1] = 0;
        else if (slash) *slash = 0;
        else snprintf(parent, sizeof parent, ".");
        if (!failed) failed = fsync_dir(parent) != 0;
    }
    double t = now_s() - t0;
    free(s);
    free(th);
    return failed ? -1 : t;
}

int raw_direct_ok(const layout *L, int nstreams) {
    for (int r = 0; r < nstreams; r++) {
        int64_t lo, hi;
        split_range(L->rows, nstreams, r, &lo, &hi);
        if (((uint64_t)lo * (uint64_t)L->cols * 4) % 4096 || ((uint64_t)(hi - lo) * (uint64_t)L->cols * 4) % 4096) return 0;
    }
    return L->tensor_bytes % 4096 == 0;
}

double raw_write(const layout *L, const uint8_t *mem, int nstreams, const char *dir, int direct) {
    return run_streams(L, (uint8_t *)mem, nstreams, nstreams, dir, 0, direct);
}

double raw_read_same(const layout *L, uint8_t *mem, int nstreams, const char *dir, int direct) {
    return run_streams(L, mem, nstreams, nstreams, dir, 1, direct);
}

double raw_read_split(const layout *L, uint8_t *mem, int nfiles, int nstreams, const char *dir) {
    return run_streams(L, mem, nstreams, nfiles, dir, 2, 0);
}

double raw_read_ckpt_files(const layout *L, int nstreams, const char *ckdir) {
    return run_streams(L, NULL, nstreams, nstreams, ckdir, 3, 0);
}
