/*
 * reduce.c - the element loops of the reductions, one per dtype and op.
 * Members are always combined in rank order, so a result is bitwise the same
 * whichever member computes it. Integer sums are done in unsigned arithmetic:
 * they wrap (two's complement) instead of being undefined. bf16 sums and
 * means accumulate in f32 and round once (see comm_reduce_block).
 */
#include <string.h>

#include "comm/comm_internal.h"
#include "core/bf16.h"

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

/*
 * bf16: a sum (or mean) widens every member's values to f32, adds them in rank
 * order in f32 and rounds the total (divided by n for a mean) to bf16 once;
 * summing in bf16 would round at every member and lose up to log2(n) bits.
 * Max and min compare the widened values and keep the chosen member's bits
 * (as the f32 loop keeps its float), first copies member 0's. The f32
 * accumulator is a stack block, so no allocation.
 */
#define BF16_CHUNK 256
static void reduce_bf16(uint16_t *restrict dst, const void *const *srcs, int n, int64_t off,
                        int64_t len, rp_reduce_op op)
{
    const uint16_t *first = (const uint16_t *)srcs[0] + off;
    if (op == RP_FIRST || op == RP_MAX || op == RP_MIN) {
        memcpy(dst, first, (size_t)len * sizeof(uint16_t));
        for (int q = 1; q < n && op != RP_FIRST; q++) {
            const uint16_t *restrict s = (const uint16_t *)srcs[q] + off;
            for (int64_t i = 0; i < len; i++) {
                float x = core_bf16_widen(s[i]), d = core_bf16_widen(dst[i]);
                if (op == RP_MAX ? x > d : x < d) dst[i] = s[i];
            }
        }
        return;
    }
    float acc[BF16_CHUNK];
    const float by = (float)n;
    for (int64_t c = 0; c < len; c += BF16_CHUNK) {
        int64_t m = len - c < BF16_CHUNK ? len - c : BF16_CHUNK;
        for (int64_t i = 0; i < m; i++)
            acc[i] = core_bf16_widen(first[c + i]);
        for (int q = 1; q < n; q++) {
            const uint16_t *restrict s = (const uint16_t *)srcs[q] + off + c;
            for (int64_t i = 0; i < m; i++)
                acc[i] += core_bf16_widen(s[i]);
        }
        if (op == RP_MEAN)
            for (int64_t i = 0; i < m; i++)
                acc[i] = acc[i] / by;
        for (int64_t i = 0; i < m; i++)
            dst[c + i] = core_bf16_round(acc[i]);
    }
}

void comm_reduce_block(void *dst, const void *const *srcs, int n, int64_t off, int64_t len,
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
    case RP_BF16:
        reduce_bf16(dst, srcs, n, off, len, op);
        break;
    case RP_U8:
        break; /* refused by comm.c: bytes are not reduced */
    }
}
