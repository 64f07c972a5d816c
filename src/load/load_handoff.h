/* load_handoff.h - thread ranks hand each other the parts of items they both read.
 *
 * On a resharded load two ranks often read parts of one item that only its owner (load_checks.h) reads
 * whole, to check it.  A small item's other reader used to read its run again from the page cache,
 * batched with the bytes between its runs (about twice the files' bytes copied out at 2 -> 3); with
 * column blocks of a row-split tensor every other reader streamed the whole item again for its share
 * (n passes over the checkpoint with n ranks).  Thread ranks share an address space, so the owner copies
 * the other ranks' parts into their buffers: a small item's single runs once the item is checked, and
 * many-run overlaps out of its own one pass over the item (box_read.c's ck_merge_hands), or after its check
 * where the runs cannot be merged in file order.  The other ranks skip those reads.  A load fails on
 * every rank if the owner's read or check fails, as before; the final agreement orders every copy
 * before any rank returns. */
#ifndef SCK_LOAD_HANDOFF_H
#define SCK_LOAD_HANDOFF_H

#include "load/ckpt.h"
#include "comm/comm.h"

/* Collective, for thread ranks (comm_in_process) after lc_assign marked the items other ranks check:
 * one comm_agree_gather of each rank's (ck, w, r), then each owner lists in ck->hands the other ranks'
 * single runs of the small items it checks (read_op.runs), and their overlaps of many runs with items
 * it reads as many runs itself, and marks their read ops `handed`, then one comm_agree
 * before anyone reads.  local: this rank's failure so far, with which it takes part.
 * Returns the agreed status (SCK_ERR_NOMEM, or any rank's). */
int lc_handoff(sck_comm *comm, sck_ckpt *ck, const ck_want *w, ck_reads *r, int local);

#endif
