/*
 * shardckpt_cuda.h - device operations (sck_device_ops) for CUDA, in libshardckpt_cuda (built only
 * where the CUDA toolkit is; the core library has no CUDA dependency).
 *
 *   sck_cuda *cu;
 *   sck_cuda_open(0, &cu);                            // device 0, a stream of its own
 *   sck_state_set_device(st, sck_cuda_ops(), cu);
 *   sck_state_add_device_box(st, "model.w", SCK_BF16, 2, shape, off, sizes, d_ptr);
 *   sck_save(comm, dir, st, NULL);                    // D2H through pinned staging, overlapped with the writes
 *   ...
 *   sck_state_free(st);                               // before sck_cuda_close: it frees pinned buffers
 *   sck_cuda_close(cu);
 *
 * Copies are cudaMemcpyAsync on the handle's stream, wait is cudaStreamSynchronize, host_alloc is
 * cudaHostAlloc (pinned).  Every op first makes the handle's device current in the calling thread, so
 * the library may call them from its background writer (sck_save_async with SCK_SAVE_NO_COPY).  One
 * handle per rank (thread); CUDA errors become SCK_ERR_IO with cudaGetErrorString's text.
 */
#ifndef SHARDCKPT_CUDA_H
#define SHARDCKPT_CUDA_H

#include "shardckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sck_cuda sck_cuda;

/** A handle for CUDA device `device` with a non-blocking stream of its own; *out is owned by the
 *  caller (sck_cuda_close).  Errors: SCK_ERR_IO (no such device, CUDA error), SCK_ERR_NOMEM. */
SCK_API int sck_cuda_open(int device, sck_cuda **out);
/** Destroys the stream and frees the handle; free every state using it first.  NULL allowed. */
SCK_API void sck_cuda_close(sck_cuda *cu);
/** The operations table (static, never freed); its ctx is an sck_cuda handle. */
SCK_API const sck_device_ops *sck_cuda_ops(void);

#ifdef __cplusplus
}
#endif
#endif /* SHARDCKPT_CUDA_H */
