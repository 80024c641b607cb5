/*
 * replicator/tensorboard.h - TensorBoard event files: scalars a program logs
 * as training goes (loss, accuracy, learning rate, throughput), for
 * `tensorboard --logdir DIR` to chart.
 *
 *     rp_tensorboard *tb;
 *     rp_tensorboard_create(&tb, "runs/mine/tb");
 *     for (step = 1; ...; step++) {
 *         rp_tensorboard_add_scalar(tb, "train/loss", step, loss);
 *         if (step % 50 == 0) rp_tensorboard_flush(tb);
 *     }
 *     rp_tensorboard_destroy(tb);
 *
 * The file is what TensorFlow's summary writers write, so TensorBoard (and
 * anything reading TFRecord event files) reads it: a sequence of TFRecord
 * records (a little-endian 64-bit length, the masked CRC-32C of those 8
 * bytes, the data, the masked CRC-32C of the data), each holding one
 * serialized tensorflow.Event protocol buffer. The first record is an Event
 * whose file_version is "brain.Event:2"; each scalar is then an Event with
 * its wall time (seconds since the epoch), its step and a Summary of one
 * Value {tag, simple_value}. The file is named
 * events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> after TensorBoard's
 * convention, so several writers (a resumed run, two processes) may share a
 * directory: TensorBoard merges the files of one directory into one run.
 *
 * A trainer writes them itself when rp_trainer_config.tensorboard_dir is
 * set and its tensorboard_writer is rp_tensorboard_scalar_writer()
 * (replicator/trainer.h); the CLI's --tensorboard DIR sets both.
 *
 * These functions live in libreplicator-extras (pkg-config replicator-extras,
 * CMake replicator::extras), not in the core library.
 *
 * Thread-safety: a writer is used by one thread at a time; different
 * writers are independent.
 */
#ifndef REPLICATOR_TENSORBOARD_H
#define REPLICATOR_TENSORBOARD_H

#include <stdint.h>

#include "core.h"
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_tensorboard rp_tensorboard;

/* Longest tag, in bytes (not counting the NUL). */
#define RP_TENSORBOARD_TAG_MAX 255 /* = RP_TRAINER_TAG_MAX */

/*
 * Creates directory `dir` (and its parents) if missing, and a new events
 * file in it, and writes the file's version record. The file is created
 * exclusively: an existing file is never overwritten (<n> counts up until a
 * name is free).
 *
 * Errors: RP_ERR_INVALID (NULL or empty dir), RP_ERR_IO (the directory or
 * the file cannot be created or written, naming it and the system's reason),
 * RP_ERR_NOMEM. On error *tb is NULL and no file is left behind.
 */
RP_API rp_status rp_tensorboard_create(rp_tensorboard **tb, const char *dir);

/*
 * Appends a scalar: `value` (stored as a float, as TensorBoard's scalars
 * are; NaN and infinities are kept) under `tag` at `step`. Tags are 1 to
 * RP_TENSORBOARD_TAG_MAX bytes of valid UTF-8; a '/' groups them in
 * TensorBoard ("train/loss", "eval/accuracy"). Steps need not increase, but
 * TensorBoard draws a tag's points in step order. Buffered: the record
 * reaches the file at the latest with the next flush.
 *
 * Errors: RP_ERR_INVALID (NULL writer, a bad tag, named), RP_ERR_IO (the
 * write failed, naming the file and the reason), RP_ERR_NOMEM. After an
 * RP_ERR_IO the file may end in a partial record, so the writer writes
 * nothing more: every later call returns RP_ERR_IO saying so.
 */
RP_API rp_status rp_tensorboard_add_scalar(rp_tensorboard *tb, const char *tag, int64_t step,
                                           double value);

/*
 * Hands what was appended to the operating system (fflush; no fsync), so
 * that TensorBoard sees it. Errors: RP_ERR_INVALID (NULL), RP_ERR_IO (as
 * above: the writer then writes nothing more).
 */
RP_API rp_status rp_tensorboard_flush(rp_tensorboard *tb);

/* The events file's path (owned by the writer), or NULL for a NULL writer. */
RP_API const char *rp_tensorboard_path(const rp_tensorboard *tb);

/*
 * Flushes, closes the file and frees the writer. NULL is a no-op (RP_OK).
 * Errors: RP_ERR_IO if the last records could not be written (the writer is
 * freed all the same); a writer whose error was already returned by an
 * earlier call returns RP_OK here.
 */
RP_API rp_status rp_tensorboard_destroy(rp_tensorboard *tb);

/*
 * The trainer's scalar writer over these functions (rp_trainer_config.tensorboard_writer):
 * create is rp_tensorboard_create, add rp_tensorboard_add_scalar, and so on. A static table;
 * never NULL.
 */
RP_API const rp_scalar_writer *rp_tensorboard_scalar_writer(void);

#ifdef __cplusplus
}
#endif

#endif
