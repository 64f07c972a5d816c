/* progress.h - a progress bar on stderr for long CLI work.
 *
 * Drawn only when stderr is a terminal and the work has run for more than a second; otherwise (piped,
 * redirected, quick) nothing is printed.  SHARDCKPT_PROGRESS=never turns it off; =always draws it
 * from the start even when stderr is not a terminal (for tests and logs).  All functions accept NULL
 * and are safe to call from several threads. */
#ifndef SCK_PROGRESS_H
#define SCK_PROGRESS_H

#include <stdint.h>

typedef struct progress progress;

/* Starts tracking `total` bytes of work labelled `label` (copied).  Returns NULL when the bar is
 * off or out of memory; that is not an error. */
progress *progress_start(const char *label, uint64_t total);
/* Records n more bytes done; redraws at most 10 times a second. */
void progress_add(progress *p, uint64_t n);
/* Changes the label (e.g. "reading" -> "writing"). */
void progress_label(progress *p, const char *label);
/* Draws the final state (if anything was drawn), ends the line and frees p. */
void progress_end(progress *p);

#endif
