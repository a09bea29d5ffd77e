/* depend: a job's --dependency, in Slurm's syntax.
 *
 *   KIND:JOB[:JOB...][,KIND:JOB[:JOB...]...]   every condition must hold
 *   afterok     the job completed
 *   afternotok  the job failed or was cancelled
 *   afterany    the job ended, however
 *
 * The CLI, the coordinator's submission check and its scheduler read it with
 * this one parser. The text travels in JobSpec.dependency as dep_format writes it.
 */
#ifndef ATOLL_DEPEND_H
#define ATOLL_DEPEND_H

#include <stddef.h>
#include <stdint.h>

#define DEP_MAX 64 /* job ids in one --dependency */

typedef enum { DEP_AFTEROK, DEP_AFTERNOTOK, DEP_AFTERANY } dep_kind;

typedef struct {
    dep_kind kind;
    uint64_t job;
} dep_item;

typedef struct {
    int n;
    dep_item item[DEP_MAX];
} dep_list;

/* 0 with out filled (n 0 for NULL or ""), or -1 with err saying what is wrong
 * and what is accepted. */
int dep_parse(const char *text, dep_list *out, char *err, size_t errlen);

/* "afterok:3:4,afterany:5", the conditions of one kind together; "" for none. */
void dep_format(const dep_list *d, char *buf, size_t len);

const char *dep_kind_name(dep_kind k);

/* Whether the condition holds for a job now in `state` (an Atoll__JobState):
 * 1 it does, 0 not yet (the job has not ended), -1 never (it ended otherwise). */
int dep_met(dep_kind k, int state);

#endif
