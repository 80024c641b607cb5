/*
 * topology.c - roles and meshes: where each worker of a job sits (its role
 * and coordinates) and its communicators (world, role, one per axis), made
 * by splitting the world communicator.
 *
 * A role's worker w has coordinates data = w / (model*pipe), pipe = w /
 * model % pipe, model = w % model. The axis communicators are splits of the
 * role's: the data axis joins the workers with the same (model, pipe), the
 * model axis those with the same (data, pipe), the pipe axis those with the
 * same (data, model); each ranked by its coordinate, so rank == coordinate.
 * Splits cost two all-gathers each, once at create; a job of one role whose
 * members are single workers (every job before roles existed) splits
 * nothing: its world is its data axis, and the other axes are one-member
 * communicators, so the step path is what it was.
 */
#include <stdio.h>
#include <string.h>

#include "replicator/replicator_internal.h"

rp_role rp_role_make(const char *name, int members, int model)
{
    rp_role r;
    memset(&r, 0, sizeof r);
    /* A name too long to hold is kept as its first sizeof name bytes with no terminator, so
     * runtime_topology_resolve refuses it by name instead of running with a shortened one. */
    if (name && strlen(name) >= sizeof r.name)
        memcpy(r.name, name, sizeof r.name);
    else
        snprintf(r.name, sizeof r.name, "%s", name ? name : "");
    r.members = members;
    r.model = model;
    r.pipe = 1;
    r.first = -1;
    return r;
}

static int role_size(const rp_role *r)
{
    return r->members * r->model * r->pipe;
}

rp_status runtime_topology_resolve(const rp_config *cfg, rp_role *out, int *nroles, int *workers)
{
    int n = cfg->nroles;
    if (n < 0 || n > RP_ROLES_MAX)
        return RP_ERROR(RP_ERR_INVALID, "nroles = %d: must be in [0, %d]", n, RP_ROLES_MAX);
    int next = 0;
    for (int i = 0; i < n; i++) {
        rp_role r = cfg->roles[i];
        size_t len = strnlen(r.name, sizeof r.name);
        if (len == 0)
            return RP_ERROR(RP_ERR_INVALID, "role %d: its name is empty (1 to %zu characters)", i,
                            sizeof r.name - 1);
        if (len == sizeof r.name)
            return RP_ERROR(RP_ERR_INVALID,
                            "role %d: its name '%.*s...' is longer than %zu characters", i,
                            (int)sizeof r.name - 1, r.name, sizeof r.name - 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(out[j].name, r.name))
                return RP_ERROR(RP_ERR_INVALID, "roles %d and %d are both named '%s'", j, i,
                                r.name);
        if (r.model == 0) r.model = 1;
        if (r.pipe == 0) r.pipe = 1;
        if (r.members < 1 || r.model < 1 || r.pipe < 1 ||
            (int64_t)r.members * r.model * r.pipe > 1 << 20)
            return RP_ERROR(RP_ERR_INVALID,
                            "role '%s': members %d x model %d x pipe %d: each must be >= 1 "
                            "(model and pipe: 0 means 1), at most 2^20 workers",
                            r.name, r.members, cfg->roles[i].model, cfg->roles[i].pipe);
        if (r.first < -1)
            return RP_ERROR(RP_ERR_INVALID, "role '%s': first = %d: a worker index, or -1", r.name,
                            r.first);
        if (r.first == -1) r.first = next;
        next = r.first + role_size(&r);
        out[i] = r;
    }
    /* The roles must tile [0, workers) exactly: every worker has exactly one role. */
    int total = 0;
    for (int i = 0; i < n; i++)
        total += role_size(&out[i]);
    for (int w = 0; w < total; w++) {
        int owners = 0, last = -1;
        for (int i = 0; i < n; i++)
            if (w >= out[i].first && w < out[i].first + role_size(&out[i])) {
                owners++;
                if (owners == 2)
                    return RP_ERROR(RP_ERR_INVALID,
                                    "worker %d is placed in both role '%s' and role '%s'", w,
                                    out[last].name, out[i].name);
                last = i;
            }
        if (owners == 0)
            return RP_ERROR(RP_ERR_INVALID,
                            "worker %d of %d is in no role: the roles' placements "
                            "(first) must cover the job's workers without gaps",
                            w, total);
    }
    *nroles = n;
    *workers = total;
    return RP_OK;
}

void runtime_topology_assign(rp_replica *rep)
{
    const rp_replicator *r = rep->r;
    for (int i = 0; i < r->nroles; i++) {
        const rp_role *ro = &r->roles[i];
        int w = rep->worker - ro->first;
        if (w < 0 || w >= role_size(ro)) continue;
        rep->role = i;
        rep->shape[RP_AXIS_DATA] = ro->members;
        rep->shape[RP_AXIS_MODEL] = ro->model;
        rep->shape[RP_AXIS_PIPE] = ro->pipe;
        rep->coord[RP_AXIS_DATA] = w / (ro->model * ro->pipe);
        rep->coord[RP_AXIS_PIPE] = w / ro->model % ro->pipe;
        rep->coord[RP_AXIS_MODEL] = w % ro->model;
        return;
    }
}

static void own(rp_replica *rep, rp_comm *c)
{
    for (int i = 0; i < rep->nowned; i++)
        if (rep->owned[i] == c) return;
    rep->owned[rep->nowned++] = c;
    if (rp_comm_size(c) > 1) rep->live[rep->nlive++] = c;
}

/* A communicator of this worker alone (an axis of extent 1): no peers, no collective to make it. */
static rp_status single(rp_replica *rep, rp_comm **out)
{
    int id = rep->worker;
    return rp_comm_threads_create(out, 1, &id, rp_comm_timeout(rep->world));
}

static rp_status split_axis(rp_replica *rep, rp_axis axis)
{
    const int *c = rep->coord, *s = rep->shape;
    int color;
    switch (axis) {
    case RP_AXIS_DATA:
        color = c[RP_AXIS_PIPE] * s[RP_AXIS_MODEL] + c[RP_AXIS_MODEL];
        break;
    case RP_AXIS_MODEL:
        color = c[RP_AXIS_DATA] * s[RP_AXIS_PIPE] + c[RP_AXIS_PIPE];
        break;
    default:
        color = c[RP_AXIS_DATA] * s[RP_AXIS_MODEL] + c[RP_AXIS_MODEL];
        break;
    }
    return rp_comm_split(rep->role_comm, color, c[axis], &rep->axis[axis]);
}

rp_status runtime_topology_split(rp_replica *rep)
{
    const rp_replicator *r = rep->r;
    rp_status status = RP_OK;
    own(rep, rep->world);
    rp_comm_begin_housekeeping(rep->world, "the runtime's topology split");
    if (r->nroles > 1)
        status = rp_comm_split(rep->world, rep->role, rep->worker, &rep->role_comm);
    else
        rep->role_comm = rep->world;
    /* The link between roles: a copy of the world that runs do not leave (owned, not live). */
    if (r->nroles > 1 && status == RP_OK)
        status = rp_comm_split(rep->world, 0, rep->worker, &rep->link);
    rp_comm_end_internal(rep->world);
    if (rep->link)
        rep->owned[rep->nowned++] = rep->link;
    else
        rep->link = rep->world;
    RP_CHECK(status);
    own(rep, rep->role_comm);
    bool flat = rep->shape[RP_AXIS_MODEL] == 1 && rep->shape[RP_AXIS_PIPE] == 1;
    rp_comm_begin_housekeeping(rep->role_comm, "the runtime's topology split");
    for (int a = 0; a < RP_AXES && status == RP_OK; a++) {
        if (a == RP_AXIS_DATA && flat)
            rep->axis[a] = rep->role_comm;
        else if (rep->shape[a] == 1)
            status = single(rep, &rep->axis[a]);
        else
            status = split_axis(rep, (rp_axis)a);
        if (status == RP_OK) own(rep, rep->axis[a]);
    }
    rp_comm_end_internal(rep->role_comm);
    RP_CHECK(status);
    rep->comm = rep->axis[RP_AXIS_DATA];
    rep->id = rp_comm_rank(rep->comm);
    rep->count = rp_comm_size(rep->comm);
    return RP_OK;
}

void runtime_topology_destroy(rp_replica *rep)
{
    /* A create that failed before the split owns only its world. */
    if (rep->nowned == 0 && rep->world) rp_comm_destroy(rep->world);
    for (int i = 0; i < rep->nowned; i++)
        rp_comm_destroy(rep->owned[i]);
    rep->nowned = rep->nlive = 0;
    rep->world = rep->link = NULL;
}
