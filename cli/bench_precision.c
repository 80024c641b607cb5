/*
 * bench_precision.c - --precision f32|bf16 as every benchmark of the command takes it: the value,
 * and what a benchmark reports of it - the compute type its replicas' tapes ran with, and for bf16
 * the path this CPU takes (rp_kernels_bf16_path).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

bool rp_cli_precision_parse(const char *v, rp_dtype *out)
{
    if (!v) return false;
    if (!strcmp(v, "f32")) {
        *out = RP_F32;
        return true;
    }
    if (!strcmp(v, "bf16")) {
        *out = RP_BF16;
        return true;
    }
    return false;
}

rp_dtype rp_cli_precision_ran(rp_replicator *r)
{
    return rp_tape_precision(rp_replica_tape(rp_replicator_replica(r, 0))).compute;
}

const char *rp_cli_precision_json(rp_dtype p, char *buf, size_t size)
{
    if (p == RP_BF16)
        snprintf(buf, size, "\"precision\":\"bf16\",\"bf16_path\":\"%s\"", rp_kernels_bf16_path());
    else
        snprintf(buf, size, "\"precision\":\"%s\"", rp_dtype_name(p));
    return buf;
}

const char *rp_cli_precision_text(rp_dtype p, char *buf, size_t size)
{
    if (p == RP_BF16)
        snprintf(buf, size, "bf16 on %s", rp_kernels_bf16_path());
    else
        snprintf(buf, size, "%s", rp_dtype_name(p));
    return buf;
}
