/* save_full.h - sck_save_full internals visible to tests: a fault-injection seam. */
#ifndef SCK_SAVE_FULL_H
#define SCK_SAVE_FULL_H

/* Stages of sck_save_full, in order: "plan" (every rank, before the plan exchange), "create" (rank 0,
 * after creating the temporary files), "write" (every rank, after writing its bytes), "commit" (rank
 * 0, before renaming).  When the hook is set and returns non-zero for (rank, stage), that rank fails
 * there with SCK_ERR_IO "injected fault at <stage>".  Tests only; NULL (the default) in production. */
typedef int (*save_full_fault_fn)(int rank, const char *stage);
extern save_full_fault_fn save_full_fault;

#endif
