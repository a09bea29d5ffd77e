/* tensorboard: scalars into a TensorBoard event file (--tensorboard-dir), as
 * Megatron's SummaryWriter leaves them, so its users' dashboards read atoll's
 * runs unchanged.
 *
 * The file, DIR/events.out.tfevents.<unix seconds>.<host>.<pid>, is a sequence
 * of records: the data's length (uint64), its masked CRC-32C (uint32), the data,
 * the data's masked CRC-32C (uint32), little-endian. Each record's data is a
 * serialized tensorflow.Event: wall_time (field 1, double), step (2, int64), and
 * file_version (3, "brain.Event:2", the first record) or summary (5: a Summary
 * whose value (1) holds a tag (1, string) and a simple_value (2, float)).
 *
 * A write that fails (disk full, the directory gone) is said once on stderr and
 * ends the writer; training goes on. Ownership: the writer owns its FILE. */
#ifndef ATOLL_ENGINE_TENSORBOARD_H
#define ATOLL_ENGINE_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tb_writer {
    FILE *f;        /* NULL: closed, or ended by a failed write */
    char path[1100];
} tb_writer;

/* Creates DIR (with its parents) and a new event file in it. 0, or -1 with err. */
int tb_open(tb_writer *w, const char *dir, char *err, size_t errlen);
/* One scalar at `step`, stamped with the wall clock. */
void tb_scalar(tb_writer *w, const char *tag, long long step, double value);
/* Makes what was written readable now (TensorBoard reads files as they grow). */
void tb_flush(tb_writer *w);
void tb_close(tb_writer *w);

/* The CRC-32C (Castagnoli) of `n` bytes, and the mask the records store it
 * under (rotated right by 15 bits, plus 0xa282ead8). */
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_masked_crc(uint32_t crc);

#endif
