/*
 * folder_fixture.h - writing small image datasets for the tests: JPEGs with
 * TurboJPEG's compressor, PNGs with libpng, ustar shards, and whole
 * ImageFolder trees (test_folder.c and the folder_make program of
 * cli_folder.sh).
 */
#ifndef RP_TESTS_FOLDER_FIXTURE_H
#define RP_TESTS_FOLDER_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

/* JPEG of w x h pixels of `channels` (1 gray, 3 RGB, 4 CMYK) at `quality`, 4:4:4. 0 or -1. */
int fx_write_jpeg(const char *path, const uint8_t *px, int w, int h, int channels, int quality);
/* The same into a malloc'ed buffer (*out, *size); 0 or -1. */
int fx_jpeg_bytes(const uint8_t *px, int w, int h, int channels, int quality, uint8_t **out,
                  size_t *size);
/* PNG of w x h pixels of `channels` (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA), 8 bits. 0 or -1. */
int fx_write_png(const char *path, const uint8_t *px, int w, int h, int channels);
/* The same into a malloc'ed buffer; 0 or -1. */
int fx_png_bytes(const uint8_t *px, int w, int h, int channels, uint8_t **out, size_t *size);
/* A smooth RGB pattern (little JPEG loss) whose colours depend on `seed`, [h, w, 3]. */
void fx_pattern(uint8_t *px, int w, int h, int seed);
/* mkdir -p; 0 or -1. */
int fx_mkdirs(const char *path);
/* Writes `bytes` to `path`; 0 or -1. */
int fx_write_file(const char *path, const void *bytes, size_t size);
/* A ustar archive of n members (names, contents), then two zero blocks; 0 or -1. */
int fx_write_tar(const char *path, const char *const *names, const uint8_t *const *data,
                 const size_t *sizes, int n);

#endif
