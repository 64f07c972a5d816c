/* sck_cuda.c - sck_device_ops for CUDA (libshardckpt_cuda): the runtime API's asynchronous copies on a
 * stream of the handle's own, stream synchronization as the wait, cudaHostAlloc as pinned memory. */
#include <stdlib.h>

#include <cuda_runtime.h>

#include "shardckpt_cuda.h"

struct sck_cuda {
    int device;
    cudaStream_t stream;
};

static int cu_err(cudaError_t e, const char *what, int device) {
    return sck_err(SCK_ERR_IO, "CUDA device %d: %s: %s", device, what, cudaGetErrorString(e));
}

/* The library may call from any of its threads: the device is made current in each. */
static int cu_enter(const sck_cuda *cu) {
    cudaError_t e = cudaSetDevice(cu->device);
    return e == cudaSuccess ? SCK_OK : cu_err(e, "cudaSetDevice", cu->device);
}

static int cu_to_host(void *ctx, void *host, const void *dev, size_t n) {
    sck_cuda *cu = ctx;
    int rc = cu_enter(cu);
    if (rc) return rc;
    cudaError_t e = cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, cu->stream);
    return e == cudaSuccess ? SCK_OK : cu_err(e, "cudaMemcpyAsync device to host", cu->device);
}

static int cu_to_device(void *ctx, void *dev, const void *host, size_t n) {
    sck_cuda *cu = ctx;
    int rc = cu_enter(cu);
    if (rc) return rc;
    cudaError_t e = cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, cu->stream);
    return e == cudaSuccess ? SCK_OK : cu_err(e, "cudaMemcpyAsync host to device", cu->device);
}

static int cu_wait(void *ctx) {
    sck_cuda *cu = ctx;
    int rc = cu_enter(cu);
    if (rc) return rc;
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    return e == cudaSuccess ? SCK_OK : cu_err(e, "cudaStreamSynchronize", cu->device);
}

static void *cu_host_alloc(void *ctx, size_t n) {
    sck_cuda *cu = ctx;
    void *p = NULL;
    if (cu_enter(cu) || cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable) != cudaSuccess) return NULL;
    return p; /* page-aligned */
}

static void cu_host_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    cudaFreeHost(p);
}

static const sck_device_ops CUDA_OPS = {cu_to_host, cu_to_device, cu_wait, cu_host_alloc, cu_host_free};

const sck_device_ops *sck_cuda_ops(void) { return &CUDA_OPS; }

int sck_cuda_open(int device, sck_cuda **out) {
    if (!out) return sck_err(SCK_ERR_INVALID_ARG, "sck_cuda_open: NULL out");
    *out = NULL;
    sck_cuda *cu = calloc(1, sizeof *cu);
    if (!cu) return sck_err(SCK_ERR_NOMEM, "sck_cuda_open: out of memory");
    cu->device = device;
    int rc = cu_enter(cu);
    cudaError_t e = rc ? cudaSuccess : cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking);
    if (!rc && e != cudaSuccess) rc = cu_err(e, "cudaStreamCreateWithFlags", device);
    if (rc) {
        free(cu);
        return rc;
    }
    *out = cu;
    return SCK_OK;
}

void sck_cuda_close(sck_cuda *cu) {
    if (!cu) return;
    if (cudaSetDevice(cu->device) == cudaSuccess) cudaStreamDestroy(cu->stream);
    free(cu);
}
