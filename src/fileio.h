/* fileio.h - sequential file writing with a staging buffer for small pieces and direct writes for
 * large ones, plus the fsync/rename steps of committing a file. */
#ifndef SCK_FILEIO_H
#define SCK_FILEIO_H

#include "util.h"

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

/* Writes `data` to dir/name atomically: dir/name.tmp, fsync, rename, fsync(dir).  Errors: SCK_ERR_IO. */
int write_file_atomic(const char *dir, const char *name, const void *data, size_t n, int do_fsync);
/* mkdir that accepts an existing directory.  Errors: SCK_ERR_IO. */
int ensure_dir(const char *dir);
int fsync_dir(const char *dir);

#endif
