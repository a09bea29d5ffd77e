/* goodput: a job's wall time split into productive training and time lost by
 * cause (start-up, checkpoint stalls, detection, restarts, recomputed steps). */
#ifndef ATOLL_GOODPUT_H
#define ATOLL_GOODPUT_H

#include "coord.h"

/* Fills out (seconds and the ratio) for job j at the coordinator's now. */
void goodput_of(coord *c, const store_job *j, Atoll__Goodput *out);

#endif
