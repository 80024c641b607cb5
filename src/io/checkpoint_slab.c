/*
 * checkpoint_slab.c - slabs of a checkpoint's tensors (replicator/io.h, rp_checkpoint_slab):
 * the slice a tensor-parallel member holds, indices [start, start + size) along one axis and all
 * of the others. A piece of a sharded checkpoint is a range of a slab's row-major order (the
 * whole tensor's when there is no slab), and a reader asks for a range of a slab of its own, so
 * reading is placing the elements two such ranges share: row by row along the last axis, after
 * merging the trailing axes both slabs span whole (a range of the whole tensor is then one row).
 * Written by hand: the copy is a few loops, and no library here addresses ranges of slices.
 */
#include <stdio.h>
#include <string.h>

#include "io/checkpoint_internal.h"
#include "io/checkpoint_shard_internal.h"

bool io_ckpt_slab_norm(const rp_checkpoint_slab *in, int ndim, const int64_t *shape,
                       rp_checkpoint_slab *out, int64_t *numel)
{
    int64_t total = 1;
    for (int d = 0; d < ndim; d++)
        total *= shape[d];
    rp_checkpoint_slab s = {-1, 0, 0};
    if (in && (in->axis < -1 || in->axis >= ndim)) return false;
    if (in && in->axis >= 0) {
        int64_t extent = shape[in->axis];
        if (in->start < 0 || in->size < 1 || in->size > extent || in->start > extent - in->size)
            return false;
        if (in->size != extent) s = *in;
    }
    *out = s;
    *numel = s.axis < 0 ? total : total / shape[s.axis] * s.size;
    return true;
}

int64_t io_ckpt_slab_copy(int ndim, const int64_t *shape, size_t esize, const rp_checkpoint_slab *a,
                          int64_t a_off, int64_t a_count, const void *src,
                          const rp_checkpoint_slab *b, int64_t b_off, int64_t b_count, void *dst)
{
    if (a_count <= 0 || b_count <= 0) return 0;
    /* Each slab as a box [lo, hi) per axis; a 0-d tensor as one axis of one element. */
    int nd = ndim > 0 ? ndim : 1;
    int64_t ext[RP_MAX_DIMS], alo[RP_MAX_DIMS], ahi[RP_MAX_DIMS], blo[RP_MAX_DIMS],
        bhi[RP_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        ext[d] = ndim > 0 ? shape[d] : 1;
        alo[d] = blo[d] = 0;
        ahi[d] = bhi[d] = ext[d];
    }
    if (a->axis >= 0) {
        alo[a->axis] = a->start;
        ahi[a->axis] = a->start + a->size;
    }
    if (b->axis >= 0) {
        blo[b->axis] = b->start;
        bhi[b->axis] = b->start + b->size;
    }
    /* A trailing axis both boxes span whole joins the one before it: fewer, longer rows. */
    while (nd > 1 && alo[nd - 1] == 0 && ahi[nd - 1] == ext[nd - 1] && blo[nd - 1] == 0 &&
           bhi[nd - 1] == ext[nd - 1]) {
        int64_t e = ext[nd - 1];
        ext[nd - 2] *= e;
        alo[nd - 2] *= e;
        ahi[nd - 2] *= e;
        blo[nd - 2] *= e;
        bhi[nd - 2] *= e;
        nd--;
    }
    int64_t lo[RP_MAX_DIMS], hi[RP_MAX_DIMS], sa[RP_MAX_DIMS], sb[RP_MAX_DIMS], idx[RP_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        lo[d] = alo[d] > blo[d] ? alo[d] : blo[d];
        hi[d] = ahi[d] < bhi[d] ? ahi[d] : bhi[d];
        if (lo[d] >= hi[d]) return 0;
        idx[d] = lo[d];
    }
    sa[nd - 1] = sb[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) {
        sa[d] = sa[d + 1] * (ahi[d + 1] - alo[d + 1]);
        sb[d] = sb[d + 1] * (bhi[d + 1] - blo[d + 1]);
    }
    const int L = nd - 1;
    int64_t shared = 0;
    for (;;) {
        /* The row idx[0..L): element c of the last axis is ra + c in a's order, rb + c in b's. */
        int64_t ra = -alo[L], rb = -blo[L];
        for (int d = 0; d < L; d++) {
            ra += (idx[d] - alo[d]) * sa[d];
            rb += (idx[d] - blo[d]) * sb[d];
        }
        int64_t c0 = lo[L], c1 = hi[L];
        if (c0 < a_off - ra) c0 = a_off - ra;
        if (c1 > a_off + a_count - ra) c1 = a_off + a_count - ra;
        if (c0 < b_off - rb) c0 = b_off - rb;
        if (c1 > b_off + b_count - rb) c1 = b_off + b_count - rb;
        if (c0 < c1) {
            if (src && dst)
                memcpy((char *)dst + (size_t)(rb + c0 - b_off) * esize,
                       (const char *)src + (size_t)(ra + c0 - a_off) * esize,
                       (size_t)(c1 - c0) * esize);
            shared += c1 - c0;
        }
        int d = L - 1;
        while (d >= 0 && ++idx[d] == hi[d]) {
            idx[d] = lo[d];
            d--;
        }
        if (d < 0) return shared;
    }
}

int io_ckpt_piece_cmp(const void *a, const void *b)
{
    const ckpt_piece *x = a, *y = b;
    int64_t kx[4] = {x->slab.axis, x->slab.start, x->slab.size, x->offset};
    int64_t ky[4] = {y->slab.axis, y->slab.start, y->slab.size, y->offset};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

bool io_ckpt_pieces_tile(const ckpt_piece *q, int n, int ndim, const int64_t *shape, char *why,
                         size_t size)
{
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    if (n < 1) {
        snprintf(why, size, "has no piece");
        return false;
    }
    int axis = q[0].slab.axis;
    int64_t next = 0; /* where the next slab must start along the axis */
    for (int j = 0; j < n;) {
        rp_checkpoint_slab s = q[j].slab;
        char where[96] = "";
        if (s.axis != axis) {
            snprintf(why, size, "shard %d's piece splits it along axis %d, shard %d's along %d",
                     q[0].shard, axis, q[j].shard, s.axis);
            return false;
        }
        if (axis >= 0) {
            if (s.start != next) {
                snprintf(why, size,
                         "indices from %lld along axis %d %s (shard %d's slab starts "
                         "at %lld)",
                         (long long)next, axis,
                         s.start > next ? "are in no shard" : "are in two shards", q[j].shard,
                         (long long)s.start);
                return false;
            }
            snprintf(where, sizeof where, " of the slab [%lld, %lld) along axis %d",
                     (long long)s.start, (long long)(s.start + s.size), axis);
        }
        int64_t slab_numel = axis < 0 ? numel : numel / shape[axis] * s.size;
        int64_t at = 0;
        for (; j < n && q[j].slab.axis == s.axis && q[j].slab.start == s.start &&
               q[j].slab.size == s.size;
             j++) {
            if (q[j].offset != at || q[j].count > slab_numel - at) {
                bool gap = q[j].offset > at;
                snprintf(why, size, "elements from %lld%s %s (shard %d's piece [%lld, %lld))",
                         (long long)at, where, gap ? "are in no shard" : "are in two shards",
                         q[j].shard, (long long)q[j].offset, (long long)(q[j].offset + q[j].count));
                return false;
            }
            at += q[j].count;
        }
        if (at != slab_numel) {
            snprintf(why, size, "elements %lld..%lld%s are in no shard", (long long)at,
                     (long long)slab_numel, where);
            return false;
        }
        if (axis < 0) {
            if (j < n) {
                snprintf(why, size, "shard %d's piece is of the whole tensor, shard %d's of a slab",
                         q[0].shard, q[j].shard);
                return false;
            }
            return true;
        }
        next = s.start + s.size;
    }
    if (next != shape[axis]) {
        snprintf(why, size, "indices %lld..%lld along axis %d are in no shard", (long long)next,
                 (long long)shape[axis], axis);
        return false;
    }
    return true;
}
