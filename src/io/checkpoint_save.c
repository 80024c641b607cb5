/*
 * checkpoint_save.c - writing checkpoints in the safetensors layout, with a
 * CRC-32 over the whole file (see replicator/io.h for the layout and why it
 * catches every single-byte error).
 *
 * Writing goes through a temporary file in the destination's directory
 * (rename is only atomic within one file system), fsynced before the rename
 * so that the name never points at a half-written file, and the directory is
 * fsynced after it so that the rename itself survives a crash. Temporary
 * files that a writer killed mid-save left behind are removed first
 * (core_file_remove_stale_temps).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "io/checkpoint_internal.h"

/* Writes all n bytes, retrying short writes and interrupted calls. */
static rp_status write_all(int fd, const void *data, size_t n, const char *path, const char *tmp)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            return RP_ERROR(RP_ERR_IO, "cannot save checkpoint %s: writing %s failed: %s", path,
                            tmp, w < 0 ? strerror(errno) : "no progress");
        }
        p += w;
        n -= (size_t)w;
    }
    return RP_OK;
}

/* A JSON number printed exactly from an int64 (cJSON would go through a double). */
static cJSON *json_int(int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_CreateRaw(buf);
}

static bool add_int_array(cJSON *obj, const char *key, const int64_t *v, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, key);
    if (!arr) return false;
    for (int i = 0; i < n; i++) {
        cJSON *num = json_int(v[i]);
        if (!num || !cJSON_AddItemToArray(arr, num)) {
            cJSON_Delete(num);
            return false;
        }
    }
    return true;
}

/*
 * The order tensors are written in: 8-byte types first, then f32, then bf16,
 * each group in insertion order. Like safetensors' own writer (which sorts
 * by descending dtype), this starts every tensor at a multiple of its
 * element size, so readers that map the file can use the data in place.
 */
static int *write_order(const rp_checkpoint *ck)
{
    int *order = rp_alloc((size_t)(ck->n_tensors > 0 ? ck->n_tensors : 1) * sizeof *order);
    if (!order) return NULL;
    int k = 0;
    for (size_t size = 8; size >= 2; size /= 2) {
        for (int i = 0; i < ck->n_tensors; i++) {
            if (io_ckpt_dtype_size(ck->tensors[i].dtype) == size) order[k++] = i;
        }
    }
    return order;
}

static bool add_tensor_entry(cJSON *root, const ckpt_tensor *t, int64_t begin)
{
    int64_t offsets[2] = {begin, begin + (int64_t)t->nbytes};
    cJSON *entry = cJSON_AddObjectToObject(root, t->name);
    return entry && cJSON_AddStringToObject(entry, "dtype", io_ckpt_dtype_name(t->dtype)) &&
           add_int_array(entry, "shape", t->shape, t->ndim) &&
           add_int_array(entry, "data_offsets", offsets, 2);
}

/*
 * Builds the header: the CRC entry first with eight '0' digits, the user's
 * metadata, then every tensor with its offsets, in `order`. Padded with
 * spaces to a multiple of 8 so that the data starts 8-byte aligned in the
 * file, as Python's safetensors writes it.
 */
static rp_status build_header(const rp_checkpoint *ck, const int *order, char **out,
                              size_t *out_len)
{
    rp_status status = RP_OK;
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = root ? cJSON_AddObjectToObject(root, "__metadata__") : NULL;
    bool ok = meta && cJSON_AddStringToObject(meta, RP_CKPT_CRC_KEY, "00000000");
    for (int i = 0; ok && i < ck->n_meta; i++) {
        ok = cJSON_AddStringToObject(meta, ck->meta[i].key, ck->meta[i].value) != NULL;
    }
    int64_t offset = 0;
    for (int i = 0; ok && i < ck->n_tensors; i++) {
        ok = add_tensor_entry(root, &ck->tensors[order[i]], offset);
        offset += (int64_t)ck->tensors[order[i]].nbytes;
    }
    text = ok ? cJSON_PrintUnformatted(root) : NULL;
    if (!text) {
        status = RP_ERROR(RP_ERR_NOMEM, "checkpoint: out of memory building the header");
        goto cleanup;
    }
    size_t len = strlen(text);
    if (len < RP_CKPT_CRC_PREFIX_LEN + RP_CKPT_CRC_DIGITS ||
        memcmp(text, RP_CKPT_CRC_PREFIX, RP_CKPT_CRC_PREFIX_LEN) != 0) {
        status = RP_ERROR(RP_ERR_BACKEND, "checkpoint: cJSON did not print the CRC entry first");
        goto cleanup;
    }
    size_t padded = (len + 7) / 8 * 8;
    *out = rp_alloc(padded);
    if (!*out) {
        status = rp_last_status();
        goto cleanup;
    }
    memcpy(*out, text, len);
    memset(*out + len, ' ', padded - len);
    *out_len = padded;
cleanup:
    cJSON_free(text);
    cJSON_Delete(root);
    return status;
}

/* fsyncs the directory holding `path`, so that a rename into it is durable. */
static rp_status sync_directory(const char *path)
{
    rp_status status = RP_OK;
    char *dir = NULL;
    size_t len = strlen(path);
    const char *slash = strrchr(path, '/');
    dir = rp_alloc(len + 2);
    if (!dir) return rp_last_status();
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        status = RP_ERROR(
            RP_ERR_IO,
            "checkpoint %s was written, but its directory %s cannot be opened to sync it: %s", path,
            dir, strerror(errno));
        goto cleanup;
    }
    /* Some file systems cannot sync a directory (EINVAL); there is nothing more to do there. */
    if (fsync(fd) != 0 && errno != EINVAL) {
        status = RP_ERROR(RP_ERR_IO,
                          "checkpoint %s was written, but syncing its directory %s failed: %s",
                          path, dir, strerror(errno));
    }
    close(fd);
cleanup:
    rp_free(dir);
    return status;
}

rp_status rp_checkpoint_save(const rp_checkpoint *ck, const char *path)
{
    static unsigned long tmp_counter;
    rp_status status = RP_OK;
    int *order = NULL;
    char *header = NULL;
    char *tmp = NULL;
    int fd = -1;
    bool created = false;

    if (!ck || !path || !*path) {
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_checkpoint_save: ck and path must not be NULL or empty");
    }
    RP_CHECK(io_ckpt_read_all(ck)); /* a view's tensors, before the header names their CRC */
    if (!io_ckpt_host_is_little_endian()) {
        return RP_ERROR(RP_ERR_UNSUPPORTED,
                        "rp_checkpoint_save: %s: big-endian hosts are not supported", path);
    }
    RP_CHECK(core_file_check_replaceable(path, "checkpoint"));

    size_t header_len = 0;
    order = write_order(ck);
    if (!order) {
        status = rp_last_status();
        goto cleanup;
    }
    RP_TRY(build_header(ck, order, &header, &header_len));
    if (header_len > RP_CHECKPOINT_HEADER_MAX) {
        status = RP_ERROR(RP_ERR_INVALID,
                          "cannot save checkpoint %s: its header would be %zu bytes, over the %d "
                          "that readers accept (metadata too large?)",
                          path, header_len, RP_CHECKPOINT_HEADER_MAX);
        goto cleanup;
    }
    unsigned char len_field[8];
    io_ckpt_put_le64(len_field, header_len);

    /* The CRC covers the whole file with its own eight digits read as '0'. */
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    crc = io_ckpt_crc_update(crc, len_field, sizeof len_field);
    crc = io_ckpt_crc_update(crc, header, header_len);
    for (int i = 0; i < ck->n_tensors; i++) {
        crc = io_ckpt_crc_update(crc, ck->tensors[order[i]].data, ck->tensors[order[i]].nbytes);
    }
    char digits[RP_CKPT_CRC_DIGITS + 1];
    snprintf(digits, sizeof digits, "%08x", (unsigned)crc);
    memcpy(header + RP_CKPT_CRC_PREFIX_LEN, digits, RP_CKPT_CRC_DIGITS);

    core_file_remove_stale_temps(path);
    size_t tmp_size = strlen(path) + 64;
    tmp = rp_alloc(tmp_size);
    if (!tmp) {
        status = rp_last_status();
        goto cleanup;
    }
    snprintf(tmp, tmp_size, "%s.tmp.%ld.%lu", path, (long)getpid(),
             __atomic_fetch_add(&tmp_counter, 1, __ATOMIC_RELAXED));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        status =
            RP_ERROR(RP_ERR_IO, "cannot save checkpoint %s: cannot create temporary file %s: %s",
                     path, tmp, strerror(errno));
        goto cleanup;
    }
    created = true;
    RP_TRY(write_all(fd, len_field, sizeof len_field, path, tmp));
    RP_TRY(write_all(fd, header, header_len, path, tmp));
    for (int i = 0; i < ck->n_tensors; i++) {
        const ckpt_tensor *t = &ck->tensors[order[i]];
        RP_TRY(write_all(fd, t->data, t->nbytes, path, tmp));
    }
    if (fsync(fd) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot save checkpoint %s: fsync of %s failed: %s", path, tmp,
                          strerror(errno));
        goto cleanup;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot save checkpoint %s: closing %s failed: %s", path, tmp,
                          strerror(errno));
        goto cleanup;
    }
    /* Again: something may have been made at the path while the file was written. */
    RP_TRY(core_file_check_replaceable(path, "checkpoint"));
    if (rename(tmp, path) != 0) {
        status = RP_ERROR(RP_ERR_IO, "cannot save checkpoint %s: renaming %s over it failed: %s",
                          path, tmp, strerror(errno));
        goto cleanup;
    }
    created = false;
    RP_TRY(sync_directory(path));
cleanup:
    if (fd >= 0) close(fd);
    if (created) unlink(tmp);
    rp_free(tmp);
    rp_free(header);
    rp_free(order);
    return status;
}
