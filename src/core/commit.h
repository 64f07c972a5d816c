/* commit.h - how a save replaces a checkpoint directory atomically (docs/FORMAT.md, "Commit").
 *
 * Every rank writes into the sibling DIR.tmp-<id>; rank 0 writes .metadata there last, then swaps it
 * with DIR in one atomic step (renameat2 RENAME_EXCHANGE), or, where the file system cannot exchange,
 * with two renames through DIR.old-<id>.  A crash at any point leaves DIR as the old or the new
 * checkpoint; readers (commit_resolve) and the next save (commit_prepare) handle the one state the
 * two-rename fallback can leave, DIR missing beside DIR.old-<id>. */
#ifndef SCK_COMMIT_H
#define SCK_COMMIT_H

#include "base/util.h"

#define COMMIT_ID_LEN 16   /* hex digits */

typedef struct commit {
    char *dir;                     /* the target: trailing slashes stripped, a symlink resolved */
    char *tmp;                     /* dir.tmp-<id>, where this save writes */
    char id[COMMIT_ID_LEN + 1];
    int tmp_holds_old;             /* a failed roll-back left the old checkpoint in tmp: keep it */
    char *prev;                    /* after commit_publish: where the previous checkpoint is, or NULL */
    int lock_fd;                   /* rank 0 from commit_prepare on: <dir>.lock, flock'ed; else -1 */
    char *lock_path;
} commit;

/* Fills c for target `dir`.  id NULL: picks a new random id (rank 0); otherwise the id rank 0 picked,
 * so every rank names the same temporary directory.  Errors: SCK_ERR_INVALID_ARG, SCK_ERR_NOMEM. */
int commit_init(commit *c, const char *dir, const char *id);
/* Releases everything, the save lock included (its file is removed while still locked). */
void commit_free(commit *c);

/* Rank 0, before any rank writes: takes the save lock (<dir>.lock, flock LOCK_EX, held until
 * commit_free; SCK_ERR_BUSY naming the holder when another save has it), finishes an interrupted swap, checks that an existing dir holds only
 * checkpoint files (.metadata, *.distcp) so that replacing it loses nothing else, removes what crashed
 * saves of dir left (dir.tmp-* / dir.old-*), and creates c->tmp.
 * Errors: SCK_ERR_BUSY, SCK_ERR_INVALID_ARG (dir holds other files), SCK_ERR_IO, SCK_ERR_NOMEM. */
int commit_prepare(commit *c);

/* Rank 0, when every data file and .metadata are in c->tmp: makes it dir, durably if do_fsync, and
 * leaves the previous checkpoint in c->prev (commit_remove_prev).  On error dir is what it was before
 * (unless a roll-back failed too, which the message says).  Errors: SCK_ERR_IO. */
int commit_publish(commit *c, int do_fsync);

/* After a save every rank agreed succeeded, each rank removes the previous checkpoint's data file of
 * its own number and rank 0 then the rest, so that the removal (about 10 ms a file here) runs in
 * parallel rather than in rank 0's commit while every rank waits.  Other ranks do not know where rank
 * 0 found it, so they look in both places it can be (dir.tmp-<id> after an exchange, dir.old-<id>
 * after the two renames).  Best effort, no errors: what remains goes at the next save. */
void commit_remove_own(const commit *c, int rank);
void commit_remove_prev(commit *c);

/* After a failed save: removes c->tmp (best effort). */
void commit_abort(commit *c);

/* Readers: the directory that holds checkpoint `dir` now.  That is dir itself, except after a crash
 * inside the two-rename fallback, where it is dir.tmp-<id> if that save had finished writing, else
 * dir.old-<id>.  *out is malloc'ed.  Errors: SCK_ERR_NOMEM. */
int commit_resolve(const char *dir, char **out);

#endif
