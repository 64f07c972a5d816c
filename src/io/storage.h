/* storage.h - the table of file operations every read and write of the library goes through, like
 * SQLite's VFS: POSIX by default; a test installs one that fails or records calls, and a backend for
 * another store (a parallel file system's tuning, a user-space object store) implements the same
 * table without touching the engine.  Also the whole-file and looping read/write helpers built on it.
 *
 * Directories are still listed with opendir/readdir (a table entry for listing is future work).
 * Descriptors a table returns must be kernel descriptors: the engine still gives the kernel advice on
 * them (posix_fadvise, sync_file_range, mincore of a mapping), hints whose failure it ignores. */
#ifndef SCK_STORAGE_H
#define SCK_STORAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Every entry has its system call's contract: -1 (or a short count) and errno on failure.  `path` is
 * the file's path for descriptor calls, for messages and per-file policies.  Called from every rank's
 * thread and from helper threads: an implementation must be thread-safe. */
typedef struct io_storage {
    void *ctx;
    int (*open)(void *ctx, const char *path, int flags, mode_t mode);
    int (*close)(void *ctx, int fd, const char *path);
    int (*fstat)(void *ctx, int fd, struct stat *sb, const char *path);
    int (*stat)(void *ctx, const char *path, struct stat *sb); /* follows symlinks, as stat(2) */
    int (*lstat)(void *ctx, const char *path, struct stat *sb);
    ssize_t (*preadv)(void *ctx, int fd, const struct iovec *iov, int n, uint64_t off, const char *path);
    ssize_t (*pwritev)(void *ctx, int fd, const struct iovec *iov, int n, uint64_t off, const char *path);
    int (*fsync)(void *ctx, int fd, const char *path);
    int (*ftruncate)(void *ctx, int fd, uint64_t size, const char *path);
    int (*setfl)(void *ctx, int fd, int flags, const char *path); /* fcntl F_SETFL */
    int (*rename)(void *ctx, const char *from, const char *to);
    /* atomic swap of two existing paths (renameat2 RENAME_EXCHANGE); EINVAL/ENOSYS where unsupported */
    int (*exchange)(void *ctx, const char *a, const char *b);
    int (*mkdir)(void *ctx, const char *path, mode_t mode);
    int (*unlink)(void *ctx, const char *path);
    int (*rmdir)(void *ctx, const char *path);
    int (*flock)(void *ctx, int fd, int op, const char *path); /* flock(2): LOCK_EX, LOCK_NB, LOCK_UN */
} io_storage;

/* The POSIX table (static). */
const io_storage *io_storage_posix(void);
/* Installs s for every later call, process-wide (NULL: the POSIX table again).  s must stay valid
 * while installed.  Set it while no save, load or open checkpoint is using files. */
void io_storage_set(const io_storage *s);
/* The table in use. */
const io_storage *io_storage_current(void);

/* Shorthands through the current table, for the read side (the save side's calls are in fileio.h). */
int io_open_read(const char *path, int flags);
int io_close_quiet(int fd, const char *path); /* an error path's close: its result is ignored */
int io_fstat(int fd, struct stat *sb, const char *path);
int io_stat(const char *path, struct stat *sb);
int io_lstat(const char *path, struct stat *sb);

/* Whole-file helpers with errors naming the path: a regular file only. */
int sck_read_file(const char *path, uint8_t **data, size_t *len);
/* The same with *data from sck_big_alloc (free with sck_big_free): for files of megabytes read once. */
int sck_read_file_big(const char *path, uint8_t **data, size_t *len);
/* sck_read_file_big of a file a checkpoint directory holds itself (.metadata, .metadata.sck): a symbolic
 * link is refused (SCK_ERR_FORMAT), as for data files, so that nothing outside the directory is read. */
int sck_read_file_own(const char *path, uint8_t **data, size_t *len);

/* pread/pwrite that loop over short transfers; short read past EOF is SCK_ERR_FORMAT ("truncated"). */
int sck_pread_full(int fd, void *buf, size_t n, uint64_t off, const char *path);
int sck_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path);
/* preadv of n (1..IOV_MAX) iovecs at off, looping over short transfers (iov is advanced in place);
 * errors as sck_pread_full's, naming `path` and the offset reached. */
int sck_preadv_full(int fd, struct iovec *iov, int n, uint64_t off, const char *path);

#endif
