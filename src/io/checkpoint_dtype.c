/*
 * checkpoint_dtype.c - a checkpoint's element types: their sizes and
 * safetensors names. Leaf functions that the writer, the reader and the bf16
 * tensors (checkpoint_bf16.c) share, in a file of their own so that none of
 * them calls another in a loop.
 */
#include <stdio.h>
#include <string.h>

#include "io/checkpoint_internal.h"

size_t io_ckpt_dtype_size(rp_checkpoint_dtype dtype)
{
    switch (dtype) {
    case RP_CHECKPOINT_F32:
        return 4;
    case RP_CHECKPOINT_I64:
        return 8;
    case RP_CHECKPOINT_U64:
        return 8;
    case RP_CHECKPOINT_BF16:
        return 2;
    }
    return 0;
}

const char *io_ckpt_dtype_name(rp_checkpoint_dtype dtype)
{
    switch (dtype) {
    case RP_CHECKPOINT_F32:
        return "F32";
    case RP_CHECKPOINT_I64:
        return "I64";
    case RP_CHECKPOINT_U64:
        return "U64";
    case RP_CHECKPOINT_BF16:
        return "BF16";
    }
    return NULL;
}

bool io_ckpt_dtype_parse(const char *name, rp_checkpoint_dtype *dtype)
{
    static const rp_checkpoint_dtype all[] = {RP_CHECKPOINT_F32, RP_CHECKPOINT_I64,
                                              RP_CHECKPOINT_U64, RP_CHECKPOINT_BF16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, io_ckpt_dtype_name(all[i])) == 0) {
            *dtype = all[i];
            return true;
        }
    }
    return false;
}
