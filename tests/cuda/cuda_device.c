/* cuda_device.c - libshardckpt_cuda on a real GPU: a state in device memory saved and loaded back
 * bit-identical (2 thread ranks save, 3 load other boxes), and the save bandwidth from the device
 * (D2H through pinned staging + write) against a save of the same bytes from host memory.
 * usage: cuda_device DIR [MiB]      Prints "skipped: no CUDA device" (exit 0) only when the runtime
 * counts no device; any other CUDA error is a failure (exit 1).  Not part of the CI count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "shardckpt_cuda.h"

typedef struct job {
    const char *dir;
    int64_t rows, cols;
    uint8_t *host;       /* the global tensor */
    int fails;
} job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int rank_rows(const job *j, int r, int n, int64_t *lo, int64_t *hi) {
    int64_t per = (j->rows + n - 1) / n;
    *lo = per * r < j->rows ? per * r : j->rows;
    *hi = per * (r + 1) < j->rows ? per * (r + 1) : j->rows;
    return 0;
}

/* save (arg mode 0) or load (mode 1) of row blocks of the tensor, in device memory */
static int run_rank(sck_comm *comm, void *arg, int load) {
    job *j = arg;
    int r = sck_comm_rank(comm), n = sck_comm_size(comm);
    int64_t lo, hi, shape[2] = {j->rows, j->cols};
    rank_rows(j, r, n, &lo, &hi);
    size_t bytes = (size_t)(hi - lo) * (size_t)j->cols * 4, at = (size_t)lo * (size_t)j->cols * 4;
    sck_cuda *cu = NULL;
    void *d = NULL;
    int rc = sck_cuda_open(0, &cu);
    if (!rc && cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) rc = sck_err(SCK_ERR_NOMEM, "cudaMalloc");
    if (!rc && !load && cudaMemcpy(d, j->host + at, bytes, cudaMemcpyHostToDevice) != cudaSuccess) rc = sck_err(SCK_ERR_IO, "cudaMemcpy");
    if (!rc && load && cudaMemset(d, 0, bytes) != cudaSuccess) rc = sck_err(SCK_ERR_IO, "cudaMemset");
    sck_state *st = sck_state_new();
    if (!rc) rc = sck_state_set_device(st, sck_cuda_ops(), cu);
    int64_t off[2] = {lo, 0}, sz[2] = {hi - lo, j->cols};
    if (!rc) rc = sck_state_add_device_box(st, "w", SCK_F32, 2, shape, off, sz, d);
    if (rc) rc = sck_comm_agree(comm, rc);
    else if (load) rc = sck_load(comm, j->dir, st, NULL);
    else rc = sck_save(comm, j->dir, st, NULL);
    if (!rc && load) {
        uint8_t *back = malloc(bytes ? bytes : 1);
        if (!back || cudaMemcpy(back, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess || memcmp(back, j->host + at, bytes))
            __atomic_fetch_add(&j->fails, 1, __ATOMIC_RELAXED);
        free(back);
    }
    if (rc) fprintf(stderr, "rank %d: %s\n", r, sck_last_error());
    sck_state_free(st);
    cudaFree(d);
    sck_cuda_close(cu);
    return rc;
}

static int save_rank(sck_comm *c, void *a) { return run_rank(c, a, 0); }
static int load_rank(sck_comm *c, void *a) { return run_rank(c, a, 1); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [MiB]\n", argv[0]);
        return 2;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if ((e == cudaSuccess && count == 0) || e == cudaErrorNoDevice) {
        printf("skipped: no CUDA device\n");
        return 0;
    }
    if (e != cudaSuccess) {
        printf("FAIL: cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
        return 1;
    }
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 1024;
    job j = {argv[1], (int64_t)(mib << 20) / 4 / 1024, 1024, NULL, 0};
    size_t n = (size_t)(j.rows * j.cols * 4);
    j.host = malloc(n);
    if (!j.host) return 1;
    for (size_t i = 0; i < n; i++) j.host[i] = (uint8_t)(i * 2654435761u >> 13);
    int rc = sck_threads_run(2, save_rank, &j);
    if (!rc) rc = sck_threads_run(3, load_rank, &j);
    if (rc || j.fails) {
        printf("FAIL: reshard 2 -> 3 through the device: %s\n", rc ? sck_last_error() : "bytes differ");
        return 1;
    }
    printf("ok   cuda reshard 2 -> 3 ranks, %zu MiB, bit-identical\n", mib);
    /* Bandwidth: one rank, device vs host, best of 3, fsync on (the files' real cost). */
    double best[2] = {1e9, 1e9};
    sck_cuda *cu;
    void *d;
    if (sck_cuda_open(0, &cu) || cudaMalloc(&d, n) != cudaSuccess || cudaMemcpy(d, j.host, n, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("FAIL: %s\n", sck_last_error());
        return 1;
    }
    int64_t shape[2] = {j.rows, j.cols}, off[2] = {0, 0};
    for (int dev = 0; dev < 2; dev++) {
        sck_state *st = sck_state_new();
        if (dev) rc = sck_state_set_device(st, sck_cuda_ops(), cu);
        if (!rc) rc = dev ? sck_state_add_device_box(st, "w", SCK_F32, 2, shape, off, shape, d)
                          : sck_state_add_box(st, "w", SCK_F32, 2, shape, off, shape, j.host);
        for (int k = 0; k < 3 && !rc; k++) {
            double t0 = now();
            rc = sck_save(NULL, argv[1], st, NULL);
            double t = now() - t0;
            if (t < best[dev]) best[dev] = t;
        }
        sck_state_free(st);
        if (rc) {
            printf("FAIL: %s\n", sck_last_error());
            return 1;
        }
    }
    printf("bandwidth, %zu MiB, 1 rank, fsync on, best of 3: host memory %.2f GB/s, device (D2H + write) %.2f GB/s\n", mib,
           (double)n / best[0] / 1e9, (double)n / best[1] / 1e9);
    cudaFree(d);
    sck_cuda_close(cu);
    free(j.host);
    return 0;
}
