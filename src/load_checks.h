/* load_checks.h - which rank checks each item of a load.  A CRC-32C covers a whole item, so checking
 * costs reading all of it; when several ranks read parts of one item (resharding), one of them (the
 * owner) reads and checks it whole and the others read only their runs.  A load fails on every rank if
 * any rank's check fails (load's final comm_agree), so every delivered byte is still covered. */
#ifndef SCK_LOAD_CHECKS_H
#define SCK_LOAD_CHECKS_H

#include "ckpt.h"
#include "comm.h"
#include "state.h"

/* What one rank will read of one item: the item is numbered across entries in model order (entry 0's
 * chunks first), the same on every rank. */
typedef struct lc_need {
    uint64_t item;
    uint64_t bytes;
} lc_need;

/* The checksummed tensor items that st's boxes overlap, with the bytes needed of each, by ascending
 * item (*out NULL when none; caller frees).  Entries the load will reject (missing, other dtype or
 * shape, bytes) are left out: nothing is read from them.  Errors: SCK_ERR_NOMEM. */
int lc_needs(const sck_ckpt *ck, const sck_state *st, lc_need **out, size_t *n);

/* The rank that checks item `item`, given every rank's list (all[r], n[r] records): the rank needing
 * most bytes of it; ties go to the tied ranks in turn, item by item (the (item mod k)-th of k tied
 * ranks), so that a load where all ranks need equal parts (column blocks) spreads the checks.  -1 if
 * no rank needs the item.  Every rank deciding from the same lists names the same owner. */
int lc_owner(const lc_need *const *all, const size_t *n, int nranks, uint64_t item);

/* Collective (one comm_agree_gather when size > 1 and the checkpoint records checksums): exchanges
 * every rank's lc_needs and marks in ck->peer_checks the items another rank checks.  A rank loading
 * with verification off (ck->verify 0) needs nothing checked and owns nothing.  Returns the agreed
 * status: SCK_ERR_NOMEM or a communicator error from any rank. */
int lc_assign(sck_comm *comm, sck_ckpt *ck, const sck_state *st);

#endif
