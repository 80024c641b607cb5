/*
 * param_residency.c - ZeRO-3's parameter values: each replica keeps its shard of the value block,
 * and a unit of parameters is gathered when an op needs it and released when the replica has
 * moved on (strategy.h, "ZeRO-3").
 *
 * Where a gathered unit lives: while the tape records (training), in one of TAPE_USE_HELD
 * gather buffers ("slots", each as long as the largest unit), with the unit's parameters
 * pointed at it; released, the parameters point back at the block. The block's pages outside
 * the shard are then never touched in training, and the slots' pages stay resident from step
 * to step: no page is given back and faulted in again twice a step (which cost this design a
 * quarter of a ResNet-50 step on 2 cores when units were gathered into the block itself). A
 * slot given a shorter unit than it held gives back the pages past it, so what is resident of
 * the slots is the units in them. Without recording (evaluation), and for a whole fetch, units
 * are gathered into the block in place, and stay.
 *
 * Units are ranges of the value block cut at parameter boundaries as the gradient buckets are
 * (strategy_bucket_order_cut, cfg.bucket_bytes), so a layer's parameters usually share one. A
 * gather is one broadcast from each owner of a piece of the unit (one or two for a unit smaller
 * than a shard): exactly the unit's bytes, and the values bitwise the owners'.
 *
 * Which units are present is the same on every member at every moment: the tape asks for the
 * same parameters in the same order on every replica (they run the same step), and presence
 * changes only through what the members all do: a gather (collective), a release (the choices
 * below depend only on that order) and the step's release of every unit. So a member that owns
 * the whole of a unit still takes part in its gather, as its root, and marks it absent when the
 * others release it (its own pages are never given back).
 *
 * What is kept present: while the tape records (training), TAPE_USE_HELD units (one op reads at
 * most that many trainable parameters: tape_residency.h). On a new gather past that, one goes: in
 * forward the least recently used (forward walks the layers in order); in backward, which walks
 * them back, least recently used is the worst choice (the unit forward used longest ago of those
 * held is the one backward needs next), so a spent unit goes first - one whose every parameter's
 * backward has run (`pending` zero: no later node reads it in this pass) - and the least
 * recently used only when none is spent. Without recording (evaluation) nothing is released,
 * so after the first pass everything is present and later passes make no collective.
 *
 * With cfg.keep_gathered (FSDP's reshard_after_forward=False) training gathers as evaluation
 * does: each unit in place, once, kept through backward, released by the step's update. The
 * step then holds every value, as ZeRO-2 does, but backward gathers nothing again, and between
 * steps a replica still holds only its shard; there are no gather buffers.
 *
 * With cfg.prefetch (FSDP's forward_prefetch and backward_prefetch), while training, using unit u
 * starts the gather of the unit the step asks for next - in forward u - 1 (forward walks the
 * layers in the order they were declared, the block's from its start, and units are cut from
 * its end), in backward u + 1 - unless it is present, by messages instead of broadcasts: each
 * owner of a piece sends it to every other member (rp_comm_isend), the others post their
 * receives (rp_comm_irecv) into the unit's slot (in place with keep), and the use of that unit
 * waits for them. The step computes meanwhile, and a member no longer waits at each gather for
 * the slowest to arrive. Every member predicts the same unit at the same moment, so the
 * messages meet; a unit predicted wrongly is waited for when it is used, or at the update.
 * The gather buffers are one more (RESIDENCY_SLOTS), for the unit in flight. Only where the
 * storage is host memory (k->host_storage): a message's buffer must stay the storage itself
 * until its wait.
 */
#include <stdlib.h>
#include <string.h>

#include "replicator/strategy.h"

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* Points unit u's parameters at base (the unit's first value there). */
static void point(residency *z, int u, float *base)
{
    strategy_point(z->params, z->first[u + 1], z->first[u], z->ranges[2 * u], base, false);
}

rp_status residency_init(residency *z, const reducer *red, const rp_params *params,
                         size_t unit_bytes, bool keep, bool prefetch)
{
    memset(z, 0, sizeof *z);
    z->keep = keep;
    z->ahead = -1;
    z->comm = red->comm;
    z->params = params;
    z->value = rp_params_data(params);
    z->numel = red->numel;
    z->shard = red->shard;
    z->lo = red->lo;
    z->hi = red->hi;
    z->size = red->size;
    z->k = red->k;
    RP_CHECK(strategy_bucket_order_cut(&z->order, params, unit_bytes ? unit_bytes : 1, &z->ranges));
    z->nunits = z->order.nbuckets;
    int n = z->nunits ? z->nunits : 1;
    z->present = malloc((size_t)n);
    z->stamp = calloc((size_t)n, sizeof *z->stamp);
    rp_status status = strategy_bucket_params(&z->order, &z->first);
    z->node = malloc((size_t)n * sizeof *z->node);
    z->where = malloc((size_t)n * sizeof *z->where);
    z->prefetch = prefetch && z->k->host_storage && z->size > 1;
    if (z->prefetch) z->reqs = calloc((size_t)z->size * (size_t)z->size, sizeof *z->reqs);
    if (status != RP_OK || !z->present || !z->stamp || !z->node || !z->where ||
        (z->prefetch && !z->reqs)) {
        residency_free(z);
        return RP_ERROR(RP_ERR_NOMEM, "cannot allocate ZeRO-3's table of %d parameter units", n);
    }
    for (int u = 0; u < z->nunits; u++) {
        int64_t len = z->ranges[2 * u + 1] - z->ranges[2 * u];
        if (len > z->slot_len) z->slot_len = len;
        z->where[u] = -1;
    }
    /* Kept units are gathered in place: no gather buffers; the prefetched unit takes one more. */
    int slots = keep ? 0 : z->prefetch ? RESIDENCY_SLOTS : TAPE_USE_HELD;
    for (int s = 0; s < RESIDENCY_SLOTS; s++) {
        z->slot_unit[s] = -1;
        z->slot[s] =
            z->slot_len && s < slots ? z->k->mem_alloc((size_t)z->slot_len * sizeof(float)) : NULL;
        if (z->slot_len && s < slots && !z->slot[s]) {
            residency_free(z);
            return RP_ERROR(RP_ERR_NOMEM,
                            "cannot allocate ZeRO-3's gather buffers (%d x %lld values)", slots,
                            (long long)z->slot_len);
        }
    }
    /* The values are whole when the optimizer is made (broadcast from replica 0). */
    residency_mark_whole(z);
    return RP_OK;
}

static void settle(residency *z);

void residency_free(residency *z)
{
    settle(z); /* no message may still write into a slot that goes */
    /* The parameters outlive the optimizer: none may point into a slot that goes. */
    for (int u = 0; z->where && z->first && u < z->nunits; u++)
        if (z->where[u] >= 0) point(z, u, z->value + z->ranges[2 * u]);
    strategy_bucket_order_destroy(&z->order);
    free(z->ranges);
    free(z->present);
    free(z->stamp);
    free(z->first);
    free(z->node);
    free(z->where);
    free(z->reqs);
    for (int s = 0; s < RESIDENCY_SLOTS; s++)
        if (z->slot[s]) z->k->mem_free(z->slot[s], (size_t)z->slot_len * sizeof(float));
    kernels_staging_free(&z->view);
    memset(z, 0, sizeof *z);
}

/* Unit u out of its slot: its parameters back on the block, the slot free. */
static void unslot(residency *z, int u)
{
    z->slot_unit[z->where[u]] = -1;
    z->where[u] = -1;
    point(z, u, z->value + z->ranges[2 * u]);
}

void residency_mark_whole(residency *z)
{
    settle(z);
    for (int u = 0; z->where && u < z->nunits; u++)
        if (z->where[u] >= 0) unslot(z, u);
    memset(z->present, 1, (size_t)(z->nunits ? z->nunits : 1));
    for (int u = 0; u < z->nunits; u++)
        z->node[u] = -1;
    z->resident = z->nunits;
}

int residency_unit_of(const residency *z, const rp_tensor *param)
{
    int i = param->index;
    if (i < 0 || i >= z->order.nparams || rp_params_at(z->params, i) != param) return -1;
    return z->order.list[z->order.first[i]];
}

/* Unit u absent: out of its slot, or its pages outside this member's shard given back. */
static void release(residency *z, int u)
{
    int64_t a = z->ranges[2 * u], b = z->ranges[2 * u + 1];
    int64_t below = clamp64(z->lo, a, b), above = clamp64(z->hi, a, b);
    if (z->where[u] >= 0) {
        unslot(z, u);
    } else {
        if (below > a) z->k->mem_discard(z->value + a, (size_t)(below - a) * sizeof(float));
        if (b > above) z->k->mem_discard(z->value + above, (size_t)(b - above) * sizeof(float));
    }
    z->present[u] = 0;
    z->node[u] = -1;
    z->resident--;
}

/* Where unit u's gather goes: a free slot (in_slot: *s), or its place in the block. */
static float *destination(residency *z, int u, bool in_slot, int *s)
{
    int64_t a = z->ranges[2 * u], b = z->ranges[2 * u + 1];
    *s = -1;
    if (!in_slot) return z->value + a;
    while (z->slot_unit[++*s] >= 0) {
    }
    float *dst = z->slot[*s];
    if (z->slot_used[*s] > b - a)
        z->k->mem_discard(dst + (b - a), (size_t)(z->slot_used[*s] - (b - a)) * sizeof(float));
    z->slot_used[*s] = b - a;
    return dst;
}

/* Unit u, gathered into dst (slot s, or -1: in place), present. */
static void arrived(residency *z, int u, int s, float *dst)
{
    if (s >= 0) {
        z->slot_unit[s] = u;
        z->where[u] = s;
        point(z, u, dst);
    }
    z->present[u] = 1;
    z->resident++;
}

/*
 * Owner q's piece [*s0, *s1) of the unit [a, b) (empty when its shard misses it); false once q's
 * shard starts past the unit: the owners of a unit are q = a / shard and on, in rank order.
 */
static bool owner_piece(const residency *z, int64_t a, int64_t b, int q, int64_t *s0, int64_t *s1)
{
    *s0 = clamp64((int64_t)q * z->shard, a, b);
    *s1 = clamp64((int64_t)(q + 1) * z->shard, a, b);
    return *s0 < b;
}

/* Unit u's values from their owners, one broadcast per owner in rank order: into a free slot
   (in_slot), or into its place in the block. */
static rp_status gather(residency *z, int u, bool in_slot)
{
    int64_t a = z->ranges[2 * u], b = z->ranges[2 * u + 1];
    int rank = rp_comm_rank(z->comm), s;
    float *dst = destination(z, u, in_slot, &s); /* where the unit's first value goes */
    rp_status status = RP_OK;
    int64_t s0, s1;
    rt_internal_begin(z->comm, "the runtime's parameter gather (ZeRO-3)");
    for (int q = (int)(a / z->shard);
         q < z->size && status == RP_OK && owner_piece(z, a, b, q, &s0, &s1); q++) {
        if (s1 <= s0) continue;
        size_t bytes = (size_t)(s1 - s0) * sizeof(float);
        float *piece = dst + (s0 - a);
        if (in_slot && q == rank) z->k->mem_copy(piece, z->value + s0, bytes); /* its own */
        void *view = strategy_view(&z->view, piece, bytes, q == rank);
        status = view ? rp_comm_broadcast(z->comm, view, s1 - s0, RP_F32, q) : rp_last_status();
        if (status == RP_OK && q != rank) strategy_commit(piece, view, bytes);
    }
    rt_internal_end(z->comm);
    RP_CHECK(status);
    arrived(z, u, s, dst);
    return RP_OK;
}

/* The message tag of the prefetched gathers (checked, never matched on: rp_comm's rules). */
#define PREFETCH_TAG 3

/*
 * Unit u's gather started by messages (prefetch): each owner of a piece sends it, from the
 * unit's destination, to every other member in rank order; each other member posts a receive
 * from it. The slot is reserved for u (slot_unit) but u is not present until finish_ahead.
 */
static rp_status start_ahead(residency *z, int u)
{
    int64_t a = z->ranges[2 * u], b = z->ranges[2 * u + 1];
    int rank = rp_comm_rank(z->comm), s;
    float *dst = destination(z, u, !z->keep, &s);
    if (s >= 0) z->slot_unit[s] = u;
    z->ahead = u;
    z->where[u] = s;
    z->nreqs = 0;
    rp_status status = RP_OK;
    int64_t s0, s1;
    rt_internal_begin(z->comm, "the runtime's parameter prefetch (ZeRO-3)");
    for (int q = (int)(a / z->shard);
         q < z->size && status == RP_OK && owner_piece(z, a, b, q, &s0, &s1); q++) {
        if (s1 <= s0) continue;
        float *piece = dst + (s0 - a);
        if (q != rank) {
            status = rp_comm_irecv(z->comm, piece, s1 - s0, RP_F32, q, PREFETCH_TAG,
                                   &z->reqs[z->nreqs++]);
            continue;
        }
        if (s >= 0) z->k->mem_copy(piece, z->value + s0, (size_t)(s1 - s0) * sizeof(float));
        for (int p = 0; p < z->size && status == RP_OK; p++)
            if (p != rank)
                status = rp_comm_isend(z->comm, piece, s1 - s0, RP_F32, p, PREFETCH_TAG,
                                       &z->reqs[z->nreqs++]);
    }
    rt_internal_end(z->comm);
    return status;
}

/* The prefetched unit's messages waited for: present from now on (its slot's, or in place). */
static rp_status finish_ahead(residency *z)
{
    int u = z->ahead, s = z->where[u];
    rt_internal_begin(z->comm, "the runtime's parameter prefetch (ZeRO-3)");
    rp_status status = rp_comm_wait_all(z->nreqs, z->reqs);
    rt_internal_end(z->comm);
    z->nreqs = 0;
    z->ahead = -1;
    if (status != RP_OK) {
        if (s >= 0) z->slot_unit[s] = -1;
        z->where[u] = -1;
        return status;
    }
    if (s >= 0) z->slot_unit[s] = -1; /* arrived() takes it again */
    arrived(z, u, s, s >= 0 ? z->slot[s] : z->value + z->ranges[2 * u]);
    return RP_OK;
}

/* A prefetch still in flight (a prediction that did not come true) waited for; its error is the
   caller's to take (settle_status) or, where nothing can fail (freeing), dropped. */
static rp_status settle_status(residency *z)
{
    return z->ahead >= 0 ? finish_ahead(z) : RP_OK;
}

static void settle(residency *z)
{
    (void)settle_status(z);
}

/* Whether every parameter of unit u has had its last backward use in this pass. */
static bool spent(const residency *z, int u)
{
    for (int i = z->first[u + 1]; i < z->first[u]; i++)
        if (rp_params_at(z->params, i)->pending > 0) return false;
    return true;
}

/*
 * The unit to release for `keep`: the present one used longest ago, in backward a spent one
 * first (the comment at the top) - and never one that the same node asked for before (it reads
 * them all; a frozen parameter is never pending, so its unit always looks spent).
 */
static int victim(const residency *z, int keep, int node)
{
    int best = -1;
    bool best_spent = false;
    for (int u = 0; u < z->nunits; u++) {
        if (!z->present[u] || u == keep || (node >= 0 && z->node[u] == node)) continue;
        bool s = node >= 0 && spent(z, u);
        if (best < 0 || (s && !best_spent) || (s == best_spent && z->stamp[u] < z->stamp[best])) {
            best = u;
            best_spent = s;
        }
    }
    return best;
}

rp_status residency_use(residency *z, int u, bool recording, int node)
{
    /* Kept (cfg.keep_gathered): gathered in place as without recording, released by the update. */
    bool evict = recording && !z->keep;
    if (u == z->ahead) RP_CHECK(finish_ahead(z));
    if (evict)
        for (int held = z->present[u] ? TAPE_USE_HELD : TAPE_USE_HELD - 1; z->resident > held;) {
            int v = victim(z, u, node);
            if (v < 0) break;
            release(z, v);
        }
    if (!z->present[u]) RP_CHECK(gather(z, u, evict));
    z->stamp[u] = ++z->clock;
    z->node[u] = node;
    /* The next unit's gather, started now and waited for when it is asked for. */
    int next = node < 0 ? u - 1 : u + 1;
    if (recording && z->prefetch && z->ahead < 0 && next >= 0 && next < z->nunits &&
        !z->present[next])
        return start_ahead(z, next);
    return RP_OK;
}

rp_status residency_release_all(residency *z)
{
    rp_status status = settle_status(z);
    for (int u = 0; u < z->nunits; u++)
        if (z->present[u]) release(z, u);
    return status;
}

rp_status residency_whole(residency *z)
{
    RP_CHECK(settle_status(z));
    for (int u = 0; u < z->nunits; u++) {
        if (z->present[u] && z->where[u] >= 0) {
            /* The slot holds the owners' values: copied into the block, in place from now. */
            int64_t a = z->ranges[2 * u], b = z->ranges[2 * u + 1];
            z->k->mem_copy(z->value + a, z->slot[z->where[u]], (size_t)(b - a) * sizeof(float));
            unslot(z, u);
        }
        if (!z->present[u]) RP_CHECK(gather(z, u, false));
    }
    return RP_OK;
}

size_t residency_bytes(const residency *z, bool resident)
{
    size_t sum = 0, bytes = (size_t)z->slot_len * sizeof(float);
    for (int s = 0; s < RESIDENCY_SLOTS; s++)
        if (z->slot[s]) sum += resident ? kernels_resident_bytes(z->k, z->slot[s], bytes) : bytes;
    return sum;
}
