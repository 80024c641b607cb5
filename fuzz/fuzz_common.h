/*
 * fuzz_common.h - what the fuzz targets share: an input as a file that the real readers open by
 * path, without a disk write per input, and the check that turns a broken promise into a finding.
 *
 * A fuzz_file is an anonymous memory file (memfd_create) that the readers reach through
 * /proc/self/fd/N: stat() sees a regular file of the input's size, open() starts at offset 0.
 * A fuzz_dir is a scratch directory made once per process (in $TMPDIR, else /dev/shm, else
 * /tmp) whose entries are symbolic links to such files, for readers that take a directory
 * (CIFAR-10's batch files), or files a target writes; it is removed at exit.
 *
 * Any failure of these helpers is a broken harness, not a finding in the code under test: they
 * print why and abort.
 */
#ifndef RP_FUZZ_COMMON_H
#define RP_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef struct fuzz_file {
    int fd;
    char path[64]; /* "/proc/self/fd/N" */
} fuzz_file;

/* Creates the memory file; `name` shows in /proc/self/fd's link target only. */
void fuzz_file_open(fuzz_file *f, const char *name);

/* Replaces the file's contents by data[0..size). */
void fuzz_file_set(fuzz_file *f, const uint8_t *data, size_t size);

/* Makes a fresh scratch directory (removed at exit with what it holds) and returns its path. */
const char *fuzz_dir_create(const char *tag);

/* Makes dir/name a symbolic link to f. */
void fuzz_dir_link(const char *dir, const char *name, const fuzz_file *f);

/*
 * A promise of the code under test that the input broke (a wrong result, an error without a
 * message): prints where and what, with the library's last error, and aborts, which libFuzzer
 * reports as a crash and saves the input for.
 */
#define FUZZ_EXPECT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                            \
    } while (0)
void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#endif
