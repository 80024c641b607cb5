/*
 * checksum.c - the parameter checksum behind the sync invariant: a hash of
 * the float bits, four FNV-style lanes over 8-float blocks (so it
 * vectorises) and one lane for the tail. It is a fixed function of the
 * bits, the same in every table, so replicas on different backends agree.
 */
#include <string.h>

#include "kernels/ref/norms.h"

uint64_t kref_checksum(const float *x, int64_t n)
{
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                     0x2545f4914f6cdd1dull};
    const uint64_t p = 0x100000001b3ull;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, x + i + 2 * l, sizeof w);
            h[l] = (h[l] ^ w) * p;
        }
    for (; i < n; i++) {
        uint32_t w;
        memcpy(&w, x + i, sizeof w);
        h[0] = (h[0] ^ w) * p;
    }
    return h[0] ^ (h[1] << 1 | h[1] >> 63) ^ (h[2] << 2 | h[2] >> 62) ^ (h[3] << 3 | h[3] >> 61);
}
