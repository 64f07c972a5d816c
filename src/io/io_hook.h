/* io_hook.h - test-only: a hook that sees every file-system call a save makes (src/fileio.c) and can
 * fail it.  Fault-injection and crash tests use it; the library never sets it. */
#ifndef SCK_IO_HOOK_H
#define SCK_IO_HOOK_H

typedef enum io_kind {
    IO_OPEN, IO_PWRITE, IO_FSYNC, IO_CLOSE, IO_RENAME, IO_EXCHANGE, IO_MKDIR, IO_UNLINK, IO_RMDIR, IO_TRUNCATE, IO_SETFL, IO_NKINDS
} io_kind;

/* Called before each call with its kind and the path (or the file's path for fd calls).  Returns 0 to
 * let the call run, or an errno value that the call then fails with (close still closes the fd, as
 * Linux does).  Called from every rank's thread: it must be thread-safe. */
typedef int (*io_hook_fn)(void *ctx, io_kind kind, const char *path);

/* Installs fn (NULL removes it).  Set it while no save is running. */
void io_hook_set(io_hook_fn fn, void *ctx);
/* "open", "pwrite", ... */
const char *io_kind_name(io_kind kind);

#endif
