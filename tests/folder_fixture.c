/* folder_fixture.c - see folder_fixture.h. */
#include "folder_fixture.h"

#include <errno.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

int fx_jpeg_bytes(const uint8_t *px, int w, int h, int channels, int quality, uint8_t **out,
                  size_t *size)
{
    tjhandle tj = tjInitCompress();
    if (!tj) return -1;
    int pf = channels == 1 ? TJPF_GRAY : channels == 4 ? TJPF_CMYK : TJPF_RGB;
    int samp = channels == 1 ? TJSAMP_GRAY : TJSAMP_444;
    unsigned char *buf = NULL;
    unsigned long n = 0;
    int rc = tjCompress2(tj, px, w, 0, h, pf, &buf, &n, samp, quality, TJFLAG_ACCURATEDCT);
    tjDestroy(tj);
    if (rc != 0) {
        tjFree(buf);
        return -1;
    }
    *out = malloc(n);
    if (!*out) {
        tjFree(buf);
        return -1;
    }
    memcpy(*out, buf, n);
    *size = n;
    tjFree(buf);
    return 0;
}

int fx_write_file(const char *path, const void *bytes, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = size ? fwrite(bytes, 1, size, f) : 0;
    return fclose(f) == 0 && w == size ? 0 : -1;
}

int fx_write_jpeg(const char *path, const uint8_t *px, int w, int h, int channels, int quality)
{
    uint8_t *b;
    size_t n;
    if (fx_jpeg_bytes(px, w, h, channels, quality, &b, &n) != 0) return -1;
    int rc = fx_write_file(path, b, n);
    free(b);
    return rc;
}

int fx_png_bytes(const uint8_t *px, int w, int h, int channels, uint8_t **out, size_t *size)
{
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = channels == 1   ? PNG_FORMAT_GRAY
                 : channels == 2 ? PNG_FORMAT_GA
                 : channels == 4 ? PNG_FORMAT_RGBA
                                 : PNG_FORMAT_RGB;
    png_alloc_size_t n = PNG_IMAGE_PNG_SIZE_MAX(img);
    *out = malloc(n);
    if (!*out) return -1;
    if (!png_image_write_to_memory(&img, *out, &n, 0, px, 0, NULL)) {
        free(*out);
        return -1;
    }
    *size = n;
    return 0;
}

int fx_write_png(const char *path, const uint8_t *px, int w, int h, int channels)
{
    uint8_t *b;
    size_t n;
    if (fx_png_bytes(px, w, h, channels, &b, &n) != 0) return -1;
    int rc = fx_write_file(path, b, n);
    free(b);
    return rc;
}

void fx_pattern(uint8_t *px, int w, int h, int seed)
{
    int a = 40 + (seed * 53) % 160, b = 30 + (seed * 97) % 160, c = (seed * 31) % 200;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(a + 50 * x / (w > 1 ? w - 1 : 1));
            p[1] = (uint8_t)(b + 60 * y / (h > 1 ? h - 1 : 1));
            p[2] = (uint8_t)(c + 40 * (x + y) / (w + h));
        }
}

int fx_mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int fx_write_tar(const char *path, const char *const *names, const uint8_t *const *data,
                 const size_t *sizes, int n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    static const uint8_t zero[512];
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        uint8_t h[512];
        memset(h, 0, sizeof h);
        snprintf((char *)h, 100, "%s", names[i]);
        snprintf((char *)h + 100, 8, "%07o", 0644);
        snprintf((char *)h + 108, 8, "%07o", 0);
        snprintf((char *)h + 116, 8, "%07o", 0);
        snprintf((char *)h + 124, 12, "%011lo", (unsigned long)sizes[i]);
        snprintf((char *)h + 136, 12, "%011o", 0);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        memcpy(h + 263, "00", 2);
        memset(h + 148, ' ', 8);
        unsigned sum = 0;
        for (int k = 0; k < 512; k++)
            sum += h[k];
        snprintf((char *)h + 148, 8, "%06o", sum);
        h[155] = ' ';
        ok = fwrite(h, 1, 512, f) == 512 && fwrite(data[i], 1, sizes[i], f) == sizes[i];
        size_t pad = (512 - sizes[i] % 512) % 512;
        if (ok && pad) ok = fwrite(zero, 1, pad, f) == pad;
    }
    if (ok) ok = fwrite(zero, 1, 512, f) == 512 && fwrite(zero, 1, 512, f) == 512;
    return fclose(f) == 0 && ok ? 0 : -1;
}
