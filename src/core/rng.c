/*
 * rng.c - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC 2011). Counter-based: block i of stream k is a pure function
 * of (k, i), which is what makes results independent of thread count.
 */
#include <math.h>

#include "replicator/core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void rp_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void rp_philox(uint64_t key, uint64_t counter, uint32_t out[4])
{
    const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    rp_philox4x32(ctr, k, out);
}

/* splitmix64's finaliser: a bijective mix with good avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

rp_rng rp_rng_make(uint64_t seed, uint64_t stream)
{
    rp_rng r = {mix64(seed * 0x9E3779B97F4A7C15ull + mix64(stream + 1)), 0};
    return r;
}

uint64_t rp_hash_str(uint64_t seed, const char *s)
{
    uint64_t h = 0xCBF29CE484222325ull ^ mix64(seed);
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001B3ull;
    }
    return mix64(h);
}

/*
 * A stream hands out one 32-bit word per draw: word j is word j%4 of block
 * j/4. Blocks are recomputed per draw; generation is cheap next to its uses
 * (shuffles, augmentation), and it keeps the state to two integers.
 */
uint32_t rp_rng_u32(rp_rng *rng)
{
    uint32_t block[4];
    rp_philox(rng->key, rng->counter >> 2, block);
    uint32_t v = block[rng->counter & 3];
    rng->counter++;
    return v;
}

static float u32_to_unit(uint32_t v)
{
    return (float)(v >> 8) * (1.0f / 16777216.0f); /* 24 bits: exact in float, < 1 */
}

float rp_rng_uniform(rp_rng *rng)
{
    return u32_to_unit(rp_rng_u32(rng));
}

uint32_t rp_rng_below(rp_rng *rng, uint32_t n)
{
    /* Lemire's multiply-shift with rejection: unbiased. */
    uint64_t m = (uint64_t)rp_rng_u32(rng) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)rp_rng_u32(rng) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void rp_rng_fill_uniform(uint64_t key, uint64_t first, float *out, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t block[4];
        uint64_t pos = first + i;
        rp_philox(key, pos, block);
        out[i] = lo + (hi - lo) * u32_to_unit(block[0]);
    }
}

/* Box-Muller on two words of the element's own block: element i owns block i. */
void rp_rng_fill_normal(uint64_t key, uint64_t first, float *out, size_t n, float mean, float std)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t block[4];
        rp_philox(key, first + i, block);
        double u1 = ((double)(block[0] >> 8) + 1.0) / 16777217.0; /* (0, 1] */
        double u2 = (double)(block[1] >> 8) / 16777216.0;
        double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        out[i] = (float)(mean + std * z);
    }
}
