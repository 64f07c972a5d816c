/* fileio.h - every file-system call a save makes, through one thin layer (so tests can fail any of
 * them, see io_hook.h): sequential file writing with a staging buffer for small pieces and direct
 * writes for large ones, fsync, rename, and removal of the flat directories a save leaves behind. */
#ifndef SCK_FILEIO_H
#define SCK_FILEIO_H

#include <sys/types.h>
#include <sys/uio.h>

#include "base/util.h"

/* The raw calls: same contract as the system calls (-1 and errno on failure). */
int io_open(const char *path, int flags, mode_t mode);
int io_fsync(int fd, const char *path);
int io_close(int fd, const char *path);
int io_rename(const char *from, const char *to);
/* Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE); EINVAL/ENOSYS where unsupported. */
int io_exchange(const char *a, const char *b);
int io_mkdir(const char *path, mode_t mode);
int io_unlink(const char *path);
int io_rmdir(const char *path);
int io_ftruncate(int fd, uint64_t size, const char *path);
/* fcntl(fd, F_SETFL, flags): a direct-mode file's end is written without O_DIRECT. */
int io_setfl(int fd, int flags, const char *path);
/* pwrite of all n bytes (looping over short writes), one hook call per request.  Errors: SCK_ERR_IO
 * naming path, size and offset. */
int io_pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path);
/* io_pwrite_full of the concatenation of iov[0..niov) (niov <= IOV_MAX); advances the entries of iov
 * it has written. */
int io_pwritev_full(int fd, struct iovec *iov, int niov, uint64_t off, const char *path);

typedef struct fwriter {
    int fd;
    char *path;
    uint64_t pos;        /* logical end of what was written so far */
    sck_buf stage;       /* small pieces not yet written, starting at stage_off */
    uint64_t stage_off;
} fwriter;

/* Creates/truncates `path` for writing.  Errors: SCK_ERR_IO, SCK_ERR_NOMEM. */
int fw_open(fwriter *w, const char *path);
/* Appends n bytes.  Errors: SCK_ERR_IO, SCK_ERR_NOMEM. */
int fw_write(fwriter *w, const void *p, uint64_t n);
/* Flushes, optionally fsyncs, closes.  Always releases resources.  Errors: SCK_ERR_IO. */
int fw_close(fwriter *w, int do_fsync);
/* Releases resources without flushing (after an error). */
void fw_abort(fwriter *w);

/* Writes `data` as the new file dir/name (optionally fsynced).  Errors: SCK_ERR_IO, SCK_ERR_NOMEM. */
int write_file(const char *dir, const char *name, const void *data, size_t n, int do_fsync);
/* write_file's first half: the file written and left open in *w (finish it with fw_close, or fw_abort),
 * its writeback started when `writeback`, so that a later fsync finds the disk done with it while the
 * caller worked.  Errors: SCK_ERR_IO, SCK_ERR_NOMEM, SCK_ERR_INVALID_ARG (path too long). */
int write_file_begin(const char *dir, const char *name, const void *data, size_t n, int writeback, fwriter *w);
/* mkdir that accepts an existing directory.  Errors: SCK_ERR_IO. */
int ensure_dir(const char *dir);
/* fsync of a directory, so entries created or renamed in it are durable.  Errors: SCK_ERR_IO. */
int fsync_dir(const char *dir);
/* Removes a directory holding only files (what a save creates): unlinks every entry, then rmdir.
 * Errors: SCK_ERR_IO (a sub-directory, or a failed call; the message names the path). */
int remove_flat_dir(const char *dir);

#endif
