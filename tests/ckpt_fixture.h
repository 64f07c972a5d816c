/* ckpt_fixture.h - a small multi-rank checkpoint in two versions (0 and 1, different bytes), for tests
 * that need "the old" and "the new" checkpoint: fault injection, crashes, checksums, hostile input. */
#ifndef SCK_TEST_CKPT_FIXTURE_H
#define SCK_TEST_CKPT_FIXTURE_H

#include "shardckpt.h"

/* Saves version v from nranks thread-ranks into dir; rcs[r] / msgs[r] (if not NULL, 512 bytes each)
 * receive each rank's status and message.  Returns rank 0's status. */
int fx_save(const char *dir, int nranks, int v, unsigned save_flags, int *rcs, char (*msgs)[512]);
/* Loads dir on one rank (with load_flags) and compares with both versions: returns 0 or 1 for the
 * version every entry equals bit-exact, -1 if the load failed (sck_last_error() says why), -2 if it
 * loaded but matches neither version (a torn checkpoint). */
int fx_load_version(const char *dir, unsigned load_flags);
/* Loads dir on `nranks` thread-ranks, each reading a different box of model.w than was saved. */
int fx_load_resharded(const char *dir, int nranks, unsigned load_flags);
/* Open file descriptors of this process. */
int fx_count_fds(void);
/* Entries of dir's parent other than dir itself (temporary or old directories a save left). */
int fx_count_siblings(const char *dir);
/* Reads / writes a whole file (test helpers; abort the test on failure by returning NULL / -1). */
unsigned char *fx_read(const char *path, size_t *n);
int fx_write(const char *path, const void *p, size_t n);

/* Decodes dir/.metadata, lets fn change the model, writes it back.  Returns a status. */
struct ck_meta;
int fx_edit_metadata(const char *dir, void (*fn)(struct ck_meta *m, void *ctx), void *ctx);
/* XORs `mask` into the byte at `off` of dir/name.  Returns 0 or -1. */
int fx_flip(const char *dir, const char *name, uint64_t off, unsigned char mask);
/* Asks the kernel to drop file dir/name's clean pages from the page cache (after syncing it).
 * Returns -1 if the file cannot be opened. */
int fx_evict(const char *dir, const char *name);
/* 1 if the page holding byte `off` of dir/name is in the page cache, 0 if not, -1 if that cannot be
 * told. */
int fx_resident(const char *dir, const char *name, uint64_t off);
/* A counter of this thread's I/O from /proc/thread-self/io ("rchar": bytes read, "syscr": read system
 * calls); 0 if it cannot be told. */
uint64_t fx_thread_io(const char *field);

#endif
