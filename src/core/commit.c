/* commit.c - atomic replacement of a checkpoint directory: temporary sibling, exchange, clean-up of
 * what crashed saves leave, and the readers' view of an interrupted swap. */
#include "core/commit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "io/fileio.h"
#include "format/meta_pt.h"
#include "format/meta_side.h"
#include "io/storage.h"

/* Splits a normalized path into its parent directory and last component (both malloc'ed). */
static int split_path(const char *dir, char **parent, char **base) {
    const char *slash = strrchr(dir, '/');
    *parent = slash ? (slash == dir ? sck_strdup("/") : sck_strndup(dir, (size_t)(slash - dir))) : sck_strdup(".");
    *base = sck_strdup(slash ? slash + 1 : dir);
    if (*parent && *base) return SCK_OK;
    free(*parent);
    free(*base);
    return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
}

/* dir without trailing slashes, malloc'ed; "" (the root) is refused. */
static int strip_slashes(const char *dir, char **out) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n == 0 || (n == 1 && dir[0] == '/') || !strcmp(dir, ".") || !strcmp(dir, ".."))
        return sck_err(SCK_ERR_INVALID_ARG, "'%s': not a directory a checkpoint can be saved as", dir);
    if (!(*out = sck_strndup(dir, n))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    return SCK_OK;
}

/* If name is "<base>.tmp-<id>" or "<base>.old-<id>" (id: COMMIT_ID_LEN hex digits), returns 't' or 'o'
 * and the id's position; else 0.  The exact id shape keeps us off any file a person named. */
static int sibling_kind(const char *name, const char *base, const char **id) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) || (strncmp(name + bl, ".tmp-", 5) && strncmp(name + bl, ".old-", 5))) return 0;
    const char *p = name + bl + 5;
    if (strlen(p) != COMMIT_ID_LEN) return 0;
    for (const char *q = p; *q; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'))) return 0;
    *id = p;
    return name[bl + 1] == 't' ? 't' : 'o';
}

static char *join3(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static int pick_id(char *out) {
    static unsigned long counter;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 32) ^
            __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    }
    snprintf(out, COMMIT_ID_LEN + 1, "%016llx", (unsigned long long)r);
    return SCK_OK;
}

int commit_init(commit *c, const char *dir, const char *id) {
    memset(c, 0, sizeof *c);
    c->lock_fd = -1;
    char *d;
    int rc = strip_slashes(dir, &d);
    if (rc) return rc;
    struct stat sb;
    if (io_lstat(d, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        /* Replace what the link points to, not the link. */
        char *real = realpath(d, NULL);
        if (real) {
            free(d);
            d = real;
        }
    }
    c->dir = d;
    if (id) {
        if (strlen(id) != COMMIT_ID_LEN) {
            commit_free(c);
            return sck_err(SCK_ERR_INVALID_ARG, "%s: bad save id '%s'", dir, id);
        }
        memcpy(c->id, id, COMMIT_ID_LEN + 1);
    } else {
        pick_id(c->id);
    }
    if (!(c->tmp = join3(c->dir, ".tmp-", c->id))) {
        commit_free(c);
        return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    }
    return SCK_OK;
}

static void unlock(commit *c) {
    if (c->lock_fd < 0 || !c->lock_path) return; /* a zeroed commit (never initialised) holds nothing */
    const io_storage *s = io_storage_current();
    /* Removed while locked: a saver waiting on the old file finds it gone and opens the path again. */
    s->unlink(s->ctx, c->lock_path);
    s->close(s->ctx, c->lock_fd, c->lock_path);
    c->lock_fd = -1;
}

/* Who holds lock file fd, from what it says ("pid P on host H since T"), for the message. */
static void lock_holder(int fd, const char *path, char *out, size_t cap) {
    char buf[256];
    struct iovec v = {buf, sizeof buf - 1};
    const io_storage *s = io_storage_current();
    ssize_t n = s->preadv(s->ctx, fd, &v, 1, 0, path);
    if (n <= 0) {
        snprintf(out, cap, "a save that has not said who it is yet");
        return;
    }
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    snprintf(out, cap, "%s", buf);
}

/* flock(LOCK_EX | LOCK_NB) of <dir>.lock, created if needed, then our identity written into it.  A file
 * its previous holder unlinked after we opened it is no lock: open the path again. */
static int lock(commit *c) {
    const io_storage *s = io_storage_current();
    if (!(c->lock_path = join3(c->dir, ".lock", ""))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", c->dir);
    for (int tries = 0; tries < 100; tries++) {
        int fd = s->open(s->ctx, c->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd < 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot open the save lock", c->lock_path);
        if (s->flock(s->ctx, fd, LOCK_EX | LOCK_NB, c->lock_path) != 0) {
            int e = errno;
            char who[256];
            if (e == EWOULDBLOCK) lock_holder(fd, c->lock_path, who, sizeof who);
            s->close(s->ctx, fd, c->lock_path);
            if (e == EWOULDBLOCK)
                return sck_err(SCK_ERR_BUSY, "%s: another save of this checkpoint is running (%s holds %s); one saver at a time",
                               c->dir, who, c->lock_path);
            return sck_err_errno(SCK_ERR_IO, e, "%s: cannot lock", c->lock_path);
        }
        struct stat a, b;
        if (s->fstat(s->ctx, fd, &a, c->lock_path) != 0 || !S_ISREG(a.st_mode)) {
            s->close(s->ctx, fd, c->lock_path);
            return sck_err(SCK_ERR_IO, "%s: the save lock is not a regular file", c->lock_path);
        }
        if (s->lstat(s->ctx, c->lock_path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
            s->close(s->ctx, fd, c->lock_path);
            continue;
        }
        char host[128] = "?", me[256];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        time_t now = time(NULL);
        struct tm tm;
        char when[32] = "?";
        if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        int n = snprintf(me, sizeof me, "pid %ld on %s since %s\n", (long)getpid(), host, when);
        struct iovec v = {me, (size_t)n};
        /* the identity is for messages only: a failure to write it leaves the lock as good */
        if (s->ftruncate(s->ctx, fd, 0, c->lock_path) == 0) (void)s->pwritev(s->ctx, fd, &v, 1, 0, c->lock_path);
        c->lock_fd = fd;
        return SCK_OK;
    }
    return sck_err(SCK_ERR_BUSY, "%s: the save lock keeps being replaced; another save is running", c->lock_path);
}

void commit_free(commit *c) {
    unlock(c);
    free(c->lock_path);
    free(c->dir);
    free(c->tmp);
    free(c->prev);
    memset(c, 0, sizeof *c);
    c->lock_fd = -1;
}

/* After a crash between the fallback's two renames: dir is missing, dir.old-<id> holds the old
 * checkpoint and dir.tmp-<id> the new one, complete if its .metadata exists.  Finds that state; on
 * SCK_OK *from is the directory that should be dir (NULL if the state is not there). */
static int find_interrupted(const char *dir, char **from) {
    *from = NULL;
    char *parent, *base;
    int rc = split_path(dir, &parent, &base);
    if (rc) return rc;
    DIR *d = opendir(parent);
    struct dirent *de;
    while (d && !rc && !*from && (de = readdir(d))) {
        const char *id;
        if (sibling_kind(de->d_name, base, &id) != 'o') continue;
        char *old = join3(parent, "/", de->d_name);
        char *tmp = old ? join3(dir, ".tmp-", id) : NULL;
        char *meta = tmp ? join3(tmp, "/", ".metadata") : NULL;
        if (!meta) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
        else if (access(meta, F_OK) == 0) *from = tmp, tmp = NULL;   /* the new one was complete: roll forward */
        else *from = old, old = NULL;                                 /* roll back */
        free(old);
        free(tmp);
        free(meta);
    }
    if (d) closedir(d);
    free(parent);
    free(base);
    return rc;
}

int commit_resolve(const char *dir, char **out) {
    *out = NULL;
    struct stat sb;
    if (io_stat(dir, &sb) != 0 && errno == ENOENT) {
        char *d;
        if (strip_slashes(dir, &d) == SCK_OK) {
            int rc = find_interrupted(d, out);
            free(d);
            if (rc) return rc;
            if (*out) return SCK_OK;
        }
    }
    if (!(*out = sck_strdup(dir))) return sck_err(SCK_ERR_NOMEM, "%s: out of memory", dir);
    return SCK_OK;
}

/* Only what saves write may be in a directory we replace. */
static int is_ckpt_file(const char *name) {
    size_t n = strlen(name);
    return !strcmp(name, ".metadata") || !strcmp(name, ".metadata.tmp") || !strcmp(name, META_SIDE_NAME) || !strcmp(name, META_PT_NAME) ||
           (n > 7 && !strcmp(name + n - 7, ".distcp"));
}

static int check_replaceable(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot list the existing directory", dir);
    int rc = SCK_OK;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || is_ckpt_file(de->d_name)) continue;
        rc = sck_err(SCK_ERR_INVALID_ARG,
                     "%s: holds '%s', which is not part of a checkpoint; refusing to replace the directory", dir, de->d_name);
    }
    closedir(d);
    return rc;
}

/* Best effort: every dir.tmp-* / dir.old-* that an earlier crashed save left. */
static void remove_leftovers(const commit *c) {
    char *parent, *base;
    if (split_path(c->dir, &parent, &base)) return;
    DIR *d = opendir(parent);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *id;
        if (!sibling_kind(de->d_name, base, &id)) continue;
        char *p = join3(parent, "/", de->d_name);
        if (p) remove_flat_dir(p);
        free(p);
    }
    if (d) closedir(d);
    free(parent);
    free(base);
    sck_err_clear();
}

int commit_prepare(commit *c) {
    int lrc = lock(c);
    if (lrc) return lrc;
    struct stat sb;
    if (io_lstat(c->dir, &sb) != 0) {
        if (errno != ENOENT) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot stat", c->dir);
        char *from = NULL;
        int rc = find_interrupted(c->dir, &from);
        if (rc) return rc;
        if (from && io_rename(from, c->dir) != 0) {
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot restore it from %s (left by a crashed save)", c->dir, from);
            free(from);
            return rc;
        }
        free(from);
    }
    if (io_lstat(c->dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) return sck_err(SCK_ERR_IO, "%s: exists and is not a directory", c->dir);
        int rc = check_replaceable(c->dir);
        if (rc) return rc;
    }
    remove_leftovers(c);
    if (io_mkdir(c->tmp, 0755) != 0) return sck_err_errno(SCK_ERR_IO, errno, "%s: cannot create directory", c->tmp);
    return SCK_OK;
}

/* Swap back after a failure past the swap; on failure records that tmp now holds the old checkpoint. */
static int undo(commit *c, int exchanged, const char *old, int rc) {
    int bad = exchanged ? io_exchange(c->tmp, c->dir) != 0
                        : (old ? io_rename(c->dir, c->tmp) != 0 || io_rename(old, c->dir) != 0 : io_rename(c->dir, c->tmp) != 0);
    if (bad) {
        c->tmp_holds_old = exchanged;
        return sck_err_wrap(rc, "%s now holds the new checkpoint (rolling back failed too)", c->dir);
    }
    return rc;
}

int commit_publish(commit *c, int do_fsync) {
    char *parent, *base;
    int rc = do_fsync ? fsync_dir(c->tmp) : SCK_OK;
    if (rc) return rc;
    if ((rc = split_path(c->dir, &parent, &base))) return rc;
    free(base);
    struct stat sb;
    char *old = NULL;
    int exchanged = 0;
    if (io_lstat(c->dir, &sb) != 0) {
        /* Nothing to replace. */
        if (io_rename(c->tmp, c->dir) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", c->tmp, c->dir);
    } else if (io_exchange(c->tmp, c->dir) == 0) {
        exchanged = 1;
    } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot exchange with %s", c->tmp, c->dir);
    } else {
        /* No RENAME_EXCHANGE here (e.g. NFS): two renames, with a moment where dir is missing that
         * commit_resolve and commit_prepare know how to read. */
        if (!(old = join3(c->dir, ".old-", c->id))) rc = sck_err(SCK_ERR_NOMEM, "%s: out of memory", c->dir);
        else if (io_rename(c->dir, old) != 0) rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", c->dir, old);
        else if (io_rename(c->tmp, c->dir) != 0) {
            rc = sck_err_errno(SCK_ERR_IO, errno, "%s: cannot rename to %s", c->tmp, c->dir);
            if (io_rename(old, c->dir) != 0) rc = sck_err_wrap(rc, "%s is left in %s (restoring it failed too)", c->dir, old);
            free(old);
            old = NULL;
            free(parent);
            return rc;
        }
    }
    if (rc) {
        free(old);
        free(parent);
        return rc;
    }
    if (do_fsync && (rc = fsync_dir(parent))) {
        rc = undo(c, exchanged, old, rc);
        free(old);
    } else {
        /* Committed.  The previous checkpoint is now in tmp (exchanged) or old, for commit_remove_prev. */
        free(c->prev);
        c->prev = exchanged ? sck_strdup(c->tmp) : old; /* out of memory: left for the next save */
    }
    free(parent);
    return rc;
}

void commit_abort(commit *c) {
    if (!c->tmp || c->tmp_holds_old) return;
    /* Keep the save's own error message, whatever the clean-up reports. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", sck_last_error());
    remove_flat_dir(c->tmp);
    sck_err_set_raw(msg);
}

void commit_remove_own(const commit *c, int rank) {
    char name[64], *p;
    snprintf(name, sizeof name, "/__%d_0.distcp", rank);
    const char *where[2] = {c->tmp, NULL};
    char *old = c->dir ? join3(c->dir, ".old-", c->id) : NULL;
    where[1] = old;
    for (int k = 0; k < 2; k++) {
        if (!where[k] || !(p = join3(where[k], name, ""))) continue;
        int gone = io_unlink(p) == 0;
        free(p);
        if (gone) break;
    }
    free(old);
    sck_err_clear();
}

void commit_remove_prev(commit *c) {
    if (!c->prev) return;
    char *p = join3(c->prev, "/__0_0.distcp", "");
    if (p) io_unlink(p); /* its own file first: the other ranks are removing theirs meanwhile */
    free(p);
    remove_flat_dir(c->prev);
    free(c->prev);
    c->prev = NULL;
    sck_err_clear();
}
