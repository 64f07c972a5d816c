/* load_checks.h - which rank checks each item of a load.  A CRC-32C covers a whole item.  When several
 * ranks read parts of one item (resharding) and each reads it as a few runs (row blocks), every reader
 * checksums runs it reads anyway (segments, chosen so they do not overlap) and the item's owner reads
 * only the rest (headers, trailer, bytes nobody reads) to checksum it; load's final agreement combines
 * the parts (sck_crc32c_combine) into the item's CRC.  Items read as many short runs (column blocks),
 * small items (up to SMALL_ITEM, read with their neighbours in one window) and items one rank reads
 * whole are read and checked whole by the owner, the others reading only their runs.  Where the ranks
 * share a page cache, the owner of a small item, and of a large one checked whole that the ranks need
 * about equally of, is the rank whose part of the files holds it: each owner streams one stretch of the
 * files.  A load fails on every rank if any check fails, so every delivered byte is still covered. */
#ifndef SCK_LOAD_CHECKS_H
#define SCK_LOAD_CHECKS_H

#include "load/ckpt.h"
#include "comm/comm.h"
#include "core/state.h"

/* What one rank will read of one item: the item is numbered across entries in model order (entry 0's
 * chunks first), the same on every rank. */
typedef struct lc_need {
    uint64_t item;
    uint64_t bytes;
} lc_need;

#define LC_RANGES 8 /* a rank reading an item as more runs than this: the item is checked whole */

/* This rank's list to send in lc_assign's exchange (*wire_len bytes at *wire; the caller frees it with
 * sck_big_free), for the
 * reads r planned for wants w (ckpt_plan_reads): per checksummed tensor item they overlap, by ascending item, {items skipped since the previous one, bytes needed, runs (0: more than
 * LC_RANGES, unknown, or the whole chunk)} and each run's {file offset, length}, as varints; the
 * items' chunks are resolved to find the runs, except those of chunks this rank reads whole.  *nrec
 * (unless NULL): how many records the list holds.  Errors: SCK_ERR_NOMEM. */
int lc_needs(sck_ckpt *ck, const ck_want *w, const ck_reads *r, uint8_t **wire, size_t *wire_len, size_t *nrec);

/* The rank that checks item `item` of the model's `nitems`, given every rank's list (all[r], n[r]
 * records): the rank needing most bytes of it; ties (ranks needing at least most - most/LC_NEAR_TIE
 * bytes) go to the tied ranks by contiguous ranges of item
 * numbers (the floor(item * k / nitems)-th of k tied ranks), so that a load where all ranks need equal
 * parts (column blocks, 1 -> 2 row blocks) spreads the checks, and an owner's items lie together in
 * the files.  -1 if no rank needs the item.  Every rank deciding from the same lists names the same
 * owner. */
#define LC_NEAR_TIE 8
int lc_owner(const lc_need *const *all, const size_t *n, int nranks, uint64_t item, uint64_t nitems);

/* Collective (when size > 1 and the checkpoint records checksums: one comm_agree_gather of a bitmap of
 * the files each rank reads; where two ranks read one file, a second one): exchanges every rank's
 * lc_needs and marks in ck->peer_checks the items another rank checks (1) or that are checked by
 * combining CRCs (2; this rank's segments and gaps in ck->combs).  Ranks that read disjoint files
 * share no item: each checks what it reads (peer_checks stays NULL) and no lists are made.  A rank loading
 * with verification off (ck->verify 0) needs nothing checked and owns nothing.  w, r: as for lc_needs
 * (a load that will fail its checks plans no reads and sends an empty list).  local: a failure of
 * this rank's planning (SCK_ERR_NOMEM), with which it takes part.  Returns the agreed status:
 * SCK_ERR_NOMEM or a communicator error from any rank, SCK_ERR_FORMAT for a malformed list.  Thread
 * ranks then plan their hand-overs (lc_handoff: two more collectives). */
int lc_assign(sck_comm *comm, sck_ckpt *ck, const ck_want *w, ck_reads *r, int local);

/* Collective, load's final agreement on `local` (one comm_agree when size == 1, the checkpoint has
 * no checksums or the ranks read disjoint files; else one comm_agree_gather of every rank's ck->segs,
 * then one comm_agree): rank r
 * combines, in offset order, the segments of the combined items numbered r modulo the world size and
 * compares each result with the metadata.  Returns the agreed status: any rank's error, or SCK_ERR_CHECKSUM naming file, key and
 * item offset (also when the parts leave bytes of the item unchecked). */
int lc_finish(sck_comm *comm, sck_ckpt *ck, int local);

#endif
