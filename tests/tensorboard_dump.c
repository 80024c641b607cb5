/*
 * tensorboard_dump.c - prints an events file's scalars for the shell tests
 * (tests/cli_tensorboard.sh): every record is read through the framing
 * reader (both CRCs checked) and unpacked with protobuf-c. Prints
 *
 *     version brain.Event:2
 *     <step> <tag> <value>
 *     ...
 *
 * and exits 0; exits 1 with a message on a corrupt record, a first record
 * that is not the version, or one that is not a single scalar.
 * Usage: tensorboard_dump FILE
 */
#include <stdio.h>

#include "io/tfrecord_internal.h"
#include "tensorboard_event.pb-c.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: tensorboard_dump FILE\n");
        return 2;
    }
    io_tfrecord_reader *r = NULL;
    if (io_tfrecord_open(&r, argv[1]) != RP_OK) {
        fprintf(stderr, "tensorboard_dump: %s\n", rp_last_error());
        return 1;
    }
    int rc = 0;
    for (long long k = 0; rc == 0; k++) {
        const uint8_t *data;
        size_t len;
        if (io_tfrecord_next(r, &data, &len) != RP_OK) {
            fprintf(stderr, "tensorboard_dump: %s\n", rp_last_error());
            rc = 1;
            break;
        }
        if (!data) break;
        IoTb__Event *e = io_tb__event__unpack(NULL, len, data);
        if (!e) {
            fprintf(stderr, "tensorboard_dump: %s: record %lld is not an Event\n", argv[1], k);
            rc = 1;
        } else if (k == 0 && e->what_case == IO_TB__EVENT__WHAT_FILE_VERSION) {
            printf("version %s\n", e->file_version);
        } else if (k > 0 && e->what_case == IO_TB__EVENT__WHAT_SUMMARY &&
                   e->summary->n_value == 1 &&
                   e->summary->value[0]->value_case == IO_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE) {
            const IoTb__Summary__Value *v = e->summary->value[0];
            printf("%lld %s %.9g\n", (long long)e->step, v->tag, (double)v->simple_value);
        } else {
            fprintf(stderr,
                    "tensorboard_dump: %s: record %lld is neither the version (first) nor "
                    "one scalar\n",
                    argv[1], k);
            rc = 1;
        }
        if (e) io_tb__event__free_unpacked(e, NULL);
    }
    io_tfrecord_close(r);
    return rc;
}
