/*
 * folder_index.c - the growing index of an image source's samples (names, labels, and for tar
 * shards each member's place), and how a sample is named in messages. A leaf: the tree and list
 * readers (folder.c), the shard reader (folder_tar.c) and the decoding threads (folder_pool.c)
 * all call it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/folder_internal.h"

rp_status folder_add_sample(rp_image_source *src, const char *name, int32_t label, int shard,
                            int64_t offset, int64_t size, int32_t **labels, int64_t *n,
                            int64_t *cap)
{
    size_t len = strlen(name) + 1;
    if (src->names_len + len > src->names_cap) {
        size_t c = src->names_cap ? src->names_cap * 2 : 1 << 16;
        while (c < src->names_len + len)
            c *= 2;
        char *p = realloc(src->names, c);
        if (!p) return RP_ERROR(RP_ERR_NOMEM, "image folder: cannot grow the index of names");
        src->names = p;
        src->names_cap = c;
    }
    if (*n == *cap) {
        int64_t c = *cap ? *cap * 2 : 1024;
        if (c > (int64_t)UINT32_MAX) c = UINT32_MAX;
        if (*n >= c) return RP_ERROR(RP_ERR_INVALID, "image folder: more than 2^32 - 1 samples");
        int32_t *l = realloc(*labels, (size_t)c * sizeof *l);
        if (l) *labels = l;
        int64_t *o = realloc(src->name_off, (size_t)c * sizeof *o);
        if (o) src->name_off = o;
        bool ok = l && o;
        if (ok && src->kind == FOLDER_TAR) {
            int32_t *sh = realloc(src->shard, (size_t)c * sizeof *sh);
            if (sh) src->shard = sh;
            int64_t *of = realloc(src->offset, (size_t)c * sizeof *of);
            if (of) src->offset = of;
            int64_t *sz = realloc(src->size, (size_t)c * sizeof *sz);
            if (sz) src->size = sz;
            ok = sh && of && sz;
        }
        if (!ok)
            return RP_ERROR(RP_ERR_NOMEM, "image folder: cannot grow the index to %lld",
                            (long long)c);
        *cap = c;
    }
    memcpy(src->names + src->names_len, name, len);
    src->name_off[*n] = (int64_t)src->names_len;
    src->names_len += len;
    (*labels)[*n] = label;
    if (src->kind == FOLDER_TAR) {
        src->shard[*n] = shard;
        src->offset[*n] = offset;
        src->size[*n] = size;
    }
    ++*n;
    return RP_OK;
}

const char *folder_sample_name(const rp_image_source *src, int64_t i)
{
    return src->names + src->name_off[i];
}

void folder_sample_describe(const rp_image_source *src, int64_t i, char *buf, size_t size)
{
    if (src->kind == FOLDER_TAR)
        snprintf(buf, size, "%s:%s", src->shards[src->shard[i]].path, folder_sample_name(src, i));
    else
        snprintf(buf, size, "%s", folder_sample_name(src, i));
}
