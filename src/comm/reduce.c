/*
 * reduce.c - the element loops of the reductions, one per dtype and op.
 * Members are always combined in rank order, so a result is bitwise the same
 * whichever member computes it. Integer sums are done in unsigned arithmetic:
 * they wrap (two's complement) instead of being undefined.
 */
#include <string.h>

#include "comm/comm_internal.h"

#define DEFINE_REDUCE(T, U, NAME)                                                                  \
    static void reduce_##NAME(T *restrict dst, const void *const *srcs, int n, int64_t off,        \
                              int64_t len, rp_reduce_op op)                                        \
    {                                                                                              \
        memcpy(dst, (const T *)srcs[0] + off, (size_t)len * sizeof(T));                            \
        if (op == RP_FIRST) return;                                                                \
        for (int q = 1; q < n; q++) {                                                              \
            const T *restrict s = (const T *)srcs[q] + off;                                        \
            switch (op) {                                                                          \
            case RP_SUM:                                                                           \
            case RP_MEAN:                                                                          \
                for (int64_t i = 0; i < len; i++)                                                  \
                    dst[i] = (T)((U)dst[i] + (U)s[i]);                                             \
                break;                                                                             \
            case RP_MAX:                                                                           \
                for (int64_t i = 0; i < len; i++)                                                  \
                    dst[i] = s[i] > dst[i] ? s[i] : dst[i];                                        \
                break;                                                                             \
            default:                                                                               \
                for (int64_t i = 0; i < len; i++)                                                  \
                    dst[i] = s[i] < dst[i] ? s[i] : dst[i];                                        \
            }                                                                                      \
        }                                                                                          \
        if (op == RP_MEAN && n > 1)                                                                \
            for (int64_t i = 0; i < len; i++)                                                      \
                dst[i] = (T)(dst[i] / (T)n);                                                       \
    }

DEFINE_REDUCE(float, float, f32)
DEFINE_REDUCE(double, double, f64)
DEFINE_REDUCE(int32_t, uint32_t, i32)
DEFINE_REDUCE(int64_t, uint64_t, i64)

void rp_reduce_block(void *dst, const void *const *srcs, int n, int64_t off, int64_t len,
                     rp_dtype dtype, rp_reduce_op op)
{
    switch (dtype) {
    case RP_F32:
        reduce_f32(dst, srcs, n, off, len, op);
        break;
    case RP_F64:
        reduce_f64(dst, srcs, n, off, len, op);
        break;
    case RP_I32:
        reduce_i32(dst, srcs, n, off, len, op);
        break;
    case RP_I64:
        reduce_i64(dst, srcs, n, off, len, op);
        break;
    case RP_U8:
    case RP_BF16:
        break; /* refused by comm.c: bytes are not reduced; bf16 not yet */
    }
}
