/*
 * dtype.c - sizes and names of the element types (replicator/core.h).
 */
#include "replicator/core.h"

size_t rp_dtype_size(rp_dtype dtype)
{
    switch (dtype) {
    case RP_F32:
        return 4;
    case RP_F64:
        return 8;
    case RP_I32:
        return 4;
    case RP_I64:
        return 8;
    case RP_U8:
        return 1;
    case RP_BF16:
        return 2;
    }
    return 0;
}

const char *rp_dtype_name(rp_dtype dtype)
{
    static const char *names[] = {"f32", "f64", "i32", "i64", "u8", "bf16"};
    return (unsigned)dtype < 6 ? names[dtype] : "?";
}
