/*
 * tape_error.c - the two messages that the tape, the forward ops and the
 * backward rules share. A file of its own so that none of them calls
 * another in a loop: each calls down into this one.
 */
#include <stdio.h>

#include "tape_internal.h"

rp_status tape_oom(void)
{
    return rp_last_status() != RP_OK ? rp_last_status()
                                     : RP_ERROR(RP_ERR_NOMEM, "backward: out of memory");
}

rp_status tape_custom_error(rp_status st, const rp_custom_op *op, const char *phase)
{
    char why[256]; /* the op's own message, copied: RP_ERROR rewrites that buffer */
    snprintf(why, sizeof why, "%s", rp_last_status() == st ? rp_last_error() : "(no message)");
    return RP_ERROR(st, "custom op \"%s\" %s failed: %s", op->name ? op->name : "(unnamed)", phase,
                    why);
}
