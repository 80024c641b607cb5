/*
 * staging.c - the tape's way across the storage seam: storage from its arena, uploads of host
 * values (labels, indices, a loss), and host views of storage for host code (collectives, batch
 * norm's reduce hook, custom ops' callbacks): the storage itself with a host table, a copy on
 * the tape's host arena otherwise. A leaf: it calls only the kernel table and the arenas, so the
 * ops, the backward rules and the tape may all call it.
 */
#include "tape_internal.h"

void *tape_store(rp_tape *t, size_t bytes)
{
    return rp_arena_alloc(t->store, bytes);
}

void *tape_upload(rp_tape *t, const void *host, size_t bytes)
{
    void *p = rp_arena_alloc(t->store, bytes);
    if (p) t->k->mem_upload(p, host, bytes);
    return p;
}

void *tape_host_in(rp_tape *t, const void *storage, size_t bytes)
{
    if (t->k->host_storage) return (void *)storage;
    void *host = rp_arena_alloc(t->arena, bytes);
    if (host) t->k->mem_download(host, storage, bytes);
    return host;
}

void *tape_host_out(rp_tape *t, void *storage, size_t bytes)
{
    return t->k->host_storage ? storage : rp_arena_alloc(t->arena, bytes);
}

void tape_host_commit(rp_tape *t, void *storage, const void *host, size_t bytes)
{
    if (host != storage) t->k->mem_upload(storage, host, bytes);
}

rp_tensor *tape_host_tensor(rp_tape *t, rp_tensor *x, bool download)
{
    if (t->k->host_storage) return x;
    rp_tensor *h = rp_arena_alloc(t->arena, sizeof *h);
    RP_PROPAGATE_NULL(h);
    *h = *x;
    h->grad = NULL; /* a callback gets gradients as arguments, never through the struct */
    h->storage = download ? tape_host_in(t, x->storage, tape_bytes(x))
                          : tape_host_out(t, x->storage, tape_bytes(x));
    return h->storage ? h : NULL;
}

void tape_host_tensor_commit(rp_tape *t, rp_tensor *x, const rp_tensor *shadow)
{
    if (shadow != x) tape_host_commit(t, x->storage, shadow->storage, tape_bytes(x));
}

void tape_set_scalar(rp_tape *t, rp_tensor *y, float value)
{
    t->k->mem_upload(y->data, &value, sizeof value);
}
