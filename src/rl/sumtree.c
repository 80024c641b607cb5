/*
 * sumtree.c - the sum-tree behind prioritised sampling (see sumtree.h).
 */
#include "rl/sumtree.h"

#include <string.h>

int64_t rl_sumtree_p2(int64_t n)
{
    int64_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

void rl_sumtree_init(rl_sumtree *t, double *node, int64_t n)
{
    t->node = node;
    t->leaves_p2 = rl_sumtree_p2(n);
    memset(node, 0, (size_t)(2 * t->leaves_p2) * sizeof(double));
}

void rl_sumtree_set(rl_sumtree *t, int64_t j, double v)
{
    int64_t i = t->leaves_p2 + j;
    t->node[i] = v;
    for (i >>= 1; i >= 1; i >>= 1)
        t->node[i] = t->node[2 * i] + t->node[2 * i + 1];
}

int64_t rl_sumtree_find(const rl_sumtree *t, double mass)
{
    int64_t i = 1;
    while (i < t->leaves_p2) {
        double left = t->node[2 * i], right = t->node[2 * i + 1];
        /* Go right only where there is mass to land on: a zero subtree is never chosen. */
        if (right > 0.0 && (mass >= left || left <= 0.0)) {
            mass -= left;
            i = 2 * i + 1;
        } else {
            i = 2 * i;
        }
    }
    return i - t->leaves_p2;
}
