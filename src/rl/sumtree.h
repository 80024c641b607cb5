/*
 * sumtree.h - a sum-tree over a fixed number of non-negative leaves, for
 * proportional prioritised sampling. Not part of the public API.
 *
 * The tree is one flat array of 2*P doubles, P the power of two >= the leaf
 * count: node 1 is the root, node i has children 2i and 2i+1, and leaf j is
 * node P + j (node 0 is unused). Every inner node holds the sum of its
 * children, recomputed from them on each update (never adjusted by a delta),
 * so rounding does not accumulate over millions of updates.
 */
#ifndef RP_RL_SUMTREE_H
#define RP_RL_SUMTREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rl_sumtree {
    double *node; /* [2 * leaves_p2], owned by whoever allocated it */
    int64_t leaves_p2;
} rl_sumtree;

/* Doubles the array needs for n >= 1 leaves, and the P that goes with it. */
int64_t rl_sumtree_p2(int64_t n);

/* Points t at `node` (2 * rl_sumtree_p2(n) doubles) and zeroes it. */
void rl_sumtree_init(rl_sumtree *t, double *node, int64_t n);

/* Sets leaf j to v >= 0 and updates its ancestors: O(log n). */
void rl_sumtree_set(rl_sumtree *t, int64_t j, double v);

static inline double rl_sumtree_get(const rl_sumtree *t, int64_t j)
{
    return t->node[t->leaves_p2 + j];
}

static inline double rl_sumtree_total(const rl_sumtree *t)
{
    return t->node[1];
}

/*
 * The leaf whose interval [prefix sum before it, prefix sum through it)
 * holds `mass`, for 0 <= mass < total: O(log n). It never returns a leaf of
 * value 0 while the total is positive: a mass that rounding puts at or past
 * the end lands on the last positive leaf.
 */
int64_t rl_sumtree_find(const rl_sumtree *t, double mass);

#endif
