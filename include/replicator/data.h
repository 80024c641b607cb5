/*
 * replicator/data.h - datasets: Fashion-MNIST/MNIST (IDX files), CIFAR-10
 * (binary batches), synthetic ImageNet-shaped data, and a user's own JPEG and
 * PNG images (an ImageFolder tree, a list file or WebDataset tar shards),
 * which are decoded and augmented batch by batch instead of held in memory.
 *
 * A dataset is held whole in memory as uint8 images in NHWC order plus one
 * int32 label per image. Loading validates everything it reads: a file that is
 * truncated, has trailing bytes, a wrong magic number or a label out of range
 * is an error whose message (rp_last_error()) names the file and what is wrong.
 * Errors from a missing or unreadable file are RP_ERR_IO; errors from corrupt
 * contents are RP_ERR_FORMAT; bad arguments are RP_ERR_INVALID; an allocation
 * failure is RP_ERR_NOMEM. On any error nothing is allocated and the output
 * pointer is set to NULL.
 *
 * Thread-safety: the loaders share no state and may run concurrently. A loaded
 * dataset is never modified by the library, so any number of threads may read
 * it at once.
 */
#ifndef REPLICATOR_DATA_H
#define REPLICATOR_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The directory Debian's dataset-fashion-mnist package installs into. */
#define RP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The decoder behind a dataset of image files (rp_dataset_load_folder); opaque. */
typedef struct rp_image_source rp_image_source;

/*
 * A labelled image dataset, images as uint8 NHWC. Either every image is in
 * memory (pixels set, source NULL), or the images are files that the loader
 * decodes and augments as it makes each batch (source set, pixels NULL; h, w
 * and c are then the shape of the images it makes).
 */
typedef struct rp_dataset {
    int64_t n;               /* samples */
    int h, w, c;             /* image shape (NHWC per sample) */
    int num_classes;         /* labels lie in [0, num_classes) */
    uint8_t *pixels;         /* [n, h, w, c], or NULL when source is set */
    int32_t *labels;         /* [n] in [0, num_classes) */
    char name[64];           /* e.g. "fashion-mnist/train" */
    rp_image_source *source; /* the image files and their decoder, or NULL; owned */
} rp_dataset;

/*
 * Reads an IDX file of unsigned bytes (magic 00 00 08 <ndim>), such as the
 * idx3 image and idx1 label files of MNIST and Fashion-MNIST. The file may be
 * gzip-compressed or plain; zlib detects which from the gzip magic. All checks
 * apply to the decompressed content (gzip checksums are checked by zlib as it
 * reads, but upstream .gz file hashes are not: Debian recompressed them).
 *
 * On success *data holds the dims[0] * ... * dims[ndim-1] bytes of the file in
 * row-major order and belongs to the caller, who frees it with rp_free();
 * *ndim is 1..4, dims[0..*ndim-1] are the dimensions and the unused entries of
 * dims are set to 0.
 *
 * Errors: RP_ERR_INVALID for a NULL argument; RP_ERR_IO if the file cannot be
 * opened or read; RP_ERR_FORMAT if the magic is wrong, the element type is not
 * unsigned byte, ndim is not 1..4, a dimension is 0 or the element count is
 * 2^31 or more, the gzip stream is corrupt, the data is shorter than the
 * header announces (the message gives the expected and the found byte counts)
 * or longer (trailing bytes); RP_ERR_NOMEM if the buffer cannot be allocated.
 * On error *data is NULL and *ndim is 0. Every message names the path.
 */
RP_API rp_status rp_idx_read(const char *path, uint8_t **data, int *ndim, int dims[4]);

/*
 * Writes an IDX file of unsigned bytes: the magic 00 00 08 <ndim>, the ndim
 * (1..4) dimensions as big-endian 32-bit numbers, then the dims[0] * ... *
 * dims[ndim-1] bytes of `data` in row-major order, uncompressed, so that
 * rp_idx_read() returns the same bytes and dims. Each dimension is 1 or more
 * and the product below 2^31 (what rp_idx_read accepts). `data` is only read.
 *
 * The file is written atomically (a temporary file in the same directory,
 * fsynced, then renamed over `path`): a failed write leaves an older file at
 * `path` intact and nothing else behind.
 *
 * Errors: RP_ERR_INVALID (NULL path, data or dims, ndim or a dimension out
 * of range, naming it), RP_ERR_IO (naming the path and the system's reason),
 * RP_ERR_NOMEM. Thread-safe: calls share no state.
 */
RP_API rp_status rp_idx_write(const char *path, const uint8_t *data, int ndim, const int *dims);

/*
 * Loads a labelled dataset from an IDX image file ([n, h, w] for one channel
 * or [n, h, w, c]) and an IDX label file ([n]), either of them gzipped or not.
 * num_classes must be 1..256; every label must be below it. `name` (may be
 * NULL for "idx") is copied, truncated to 63 characters.
 *
 * On success *ds is a new dataset owned by the caller, freed with
 * rp_dataset_destroy(). Errors: those of rp_idx_read() for either file, and
 * RP_ERR_FORMAT if the image file is not 3-D or 4-D, the label file is not
 * 1-D, the two counts differ, or a label is >= num_classes (the message names
 * the file, the sample index and the value); RP_ERR_INVALID for a NULL path or
 * a num_classes out of range. On error *ds is NULL.
 */
RP_API rp_status rp_dataset_load_idx(rp_dataset **ds, const char *images_path,
                                     const char *labels_path, int num_classes, const char *name);

/*
 * Loads a split of Fashion-MNIST or MNIST (10 classes, 28x28x1) from `dir`,
 * which holds the standard files train-images-idx3-ubyte, train-labels-idx1-
 * ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each either plain
 * or with a .gz suffix (the plain file is preferred when both exist). `split`
 * is "train" or "test" ("t10k" is accepted for "test"). A NULL dir means
 * rp_env_get()->data_dir ($RP_DATA_DIR, by default RP_FASHION_MNIST_DIR).
 * The dataset is named "<last component of dir>/<split>", e.g.
 * "fashion-mnist/train".
 *
 * On success *ds is owned by the caller (rp_dataset_destroy()). Errors: as
 * rp_dataset_load_idx(); RP_ERR_INVALID for an unknown split; RP_ERR_IO if a
 * file is found under neither name, with a message that names the directory
 * and both names it looked for, and, when dir is the default Debian location,
 * suggests `apt-get install dataset-fashion-mnist`. On error *ds is NULL.
 */
RP_API rp_status rp_dataset_load_mnist(rp_dataset **ds, const char *dir, const char *split);

/*
 * Loads CIFAR-10 from its binary distribution in `dir`: data_batch_1.bin ..
 * data_batch_5.bin for split "train", test_batch.bin for split "test". Each
 * file is a sequence of 3073-byte records: one label byte (0..9), then the
 * 32x32 red plane, the green plane and the blue plane, each row-major. The
 * planes are converted to NHWC (32x32x3). A file may hold any positive whole
 * number of records (the official ones hold 10000). The dataset is named
 * "cifar-10/<split>".
 *
 * On success *ds is owned by the caller (rp_dataset_destroy()). Errors:
 * RP_ERR_INVALID for a NULL argument or an unknown split; RP_ERR_IO if a file
 * is missing or unreadable (the message names the path); RP_ERR_FORMAT if a
 * file is empty, is not a whole number of records (a truncated record; the
 * message gives the size and the bytes left over), or holds a label above 9
 * (the message names the file, the record and the value); RP_ERR_NOMEM. On
 * error *ds is NULL.
 */
RP_API rp_status rp_dataset_load_cifar10(rp_dataset **ds, const char *dir, const char *split);

/*
 * Makes a synthetic dataset for throughput work, e.g. n x 224x224x3 with 1000
 * classes for ImageNet-shaped runs. Pixel byte j (in NHWC order over the whole
 * dataset) and label i are pure functions of (seed, j) and (seed, i) through
 * rp_philox(), so the same seed always gives the same data and different
 * seeds give different data. Labels are uniform in [0, num_classes). The
 * dataset is named "synthetic/<h>x<w>x<c>".
 *
 * On success *ds is owned by the caller (rp_dataset_destroy()). Errors:
 * RP_ERR_INVALID if n, h, w, c or num_classes is not positive or n*h*w*c
 * overflows; RP_ERR_NOMEM if the pixels do not fit in memory. On error *ds is
 * NULL.
 */
RP_API rp_status rp_dataset_synthetic(rp_dataset **ds, int64_t n, int h, int w, int c,
                                      int num_classes, uint64_t seed);

/*
 * Makes a copy of `in` whose images are h x w, `in`'s centred in them on a
 * background of zero bytes (e.g. Fashion-MNIST's 28x28 padded to the 32x32 of
 * CIFAR-shaped networks; an odd margin puts the extra pixel after). Labels,
 * classes and channels are kept; the name gains "@<h>x<w>". h and w must be
 * at least in's. On success *out is owned by the caller (rp_dataset_destroy()).
 * Errors: RP_ERR_INVALID (NULL, or a size smaller than in's, naming both),
 * RP_ERR_NOMEM. On error *out is NULL.
 */
RP_API rp_status rp_dataset_pad(rp_dataset **out, const rp_dataset *in, int h, int w);

/* ---- image files: ImageFolder trees, list files, WebDataset shards ------------ */

/* Most classes a dataset of image files may have (labels are below it). */
#define RP_FOLDER_MAX_CLASSES (1 << 20)
/* Most pixels a decoded image may have (after DCT scaling): 2^26, 192 MiB as RGB. */
#define RP_IMAGE_MAX_PIXELS (1 << 26)

/*
 * How a dataset of image files is read, decoded and augmented (docs/data.md).
 * Start from rp_folder_config_default(); the defaults are torchvision's
 * ImageNet recipe (transforms.RandomResizedCrop(224), RandomHorizontalFlip(),
 * Resize(256), CenterCrop(224), Normalize(IMAGENET mean, std)).
 */
typedef struct rp_folder_config {
    int image_size;             /* side of the square images made, train and eval (224) */
    int resize_size;            /* eval: the short side is resized to this, then the centre
                                   image_size x image_size is cut; >= image_size (0: image_size
                                   * 256 / 224 rounded, torchvision's 256 for 224) */
    float scale_min, scale_max; /* RandomResizedCrop's area fraction range (0.08, 1) */
    float ratio_min, ratio_max; /* its aspect ratio (w/h) range (3/4, 4/3) */
    float mean[3], std[3];      /* normalisation of pixel / 255 (ImageNet's) */
    int threads;                /* decoding threads of the dataset, shared by its loaders (2) */
    bool skip_bad;              /* false: a file that cannot be decoded stops the run with an
                                   error naming it; true: it is logged once, counted and
                                   replaced by the next sample that decodes (docs/data.md) */
    bool dct_scaling;           /* training crops decode large JPEGs at a reduced size (true) */
} rp_folder_config;

/* The defaults above: 224, 0 (256), (0.08, 1), (3/4, 4/3), ImageNet's mean and std,
   2 threads, no skipping, DCT scaling on. */
RP_API rp_folder_config rp_folder_config_default(void);

/*
 * Reads the index of split `split` ("train"; "val" or "test", which name the
 * same split) of a dataset of JPEG and PNG files. `spec` says where it is:
 *
 *   DIR       torchvision's ImageFolder layout: DIR/train/<class>/... and
 *             DIR/val/<class>/...; classes are train's subdirectories sorted
 *             by name (byte order), label i the i-th; each class's files are
 *             found recursively (symbolic links followed), directories and
 *             then files in sorted order, keeping names that end in .jpg,
 *             .jpeg or .png in any case, exactly as torchvision's
 *             ImageFolder orders them. val's classes are named by train's
 *             (a val class missing is allowed, one train lacks is an error).
 *   list:DIR  list files DIR/train.txt and DIR/val.txt: one "path label" a
 *             line (the label the last field, decimal digits; a relative path
 *             is relative to DIR; blank lines and lines starting with '#' are
 *             skipped; a line holding a NUL byte is bad).
 *   tar:DIR   WebDataset shards DIR/train/<any>.tar and DIR/val/<any>.tar in
 *             name order: a sample is the adjacent members sharing a key (the
 *             name up to the first dot of its last component), with an image
 *             (.jpg, .jpeg or .png) and its label as decimal text (.cls).
 *
 * Only the index is read here (names, labels; for shards the members'
 * offsets): images are decoded by the loader, on the dataset's threads, as it
 * makes each batch. The dataset has pixels NULL, h = w = cfg->image_size,
 * c = 3 (grayscale and CMYK images are converted to RGB as PIL's
 * convert("RGB") does), and is named "<last component of DIR>/<split>".
 * The loader makes a training sample (rp_loader_config.augment) as
 * RandomResizedCrop + flip (rp_loader_config.flip) and an evaluation sample
 * as Resize + CenterCrop, then normalises with the loader's mean and std.
 *
 * On success *ds is owned by the caller (rp_dataset_destroy()). Errors:
 * RP_ERR_INVALID (a NULL argument, an unknown split, a configuration value
 * out of range, naming it); RP_ERR_IO (a missing or unreadable directory,
 * list or shard, naming it: e.g. DIR/val when it does not exist); RP_ERR_FORMAT
 * (no class directory; a class without an image file; a list line without a
 * label or with a label out of range, naming file and line; a shard member
 * that runs past the end of its file, a corrupt tar header, a sample without
 * its image or .cls; each naming the file). With cfg->skip_bad an empty class,
 * a bad list line or a bad shard member is logged and left out instead.
 * RP_ERR_NOMEM. On error *ds is NULL. Thread-safe: calls share no state.
 */
RP_API rp_status rp_dataset_load_folder(rp_dataset **ds, const char *spec, const char *split,
                                        const rp_folder_config *cfg);

/*
 * For a dataset of image files: the path of sample i (for a shard member
 * "SHARD.tar:NAME"), copied into buf (truncated to size), and its class name
 * (ImageFolder) or NULL in *class_name if class_name is not NULL. Returns
 * RP_ERR_INVALID for a dataset without files or i out of range.
 */
RP_API rp_status rp_dataset_sample_path(const rp_dataset *ds, int64_t i, char *buf, size_t size,
                                        const char **class_name);

/*
 * Files that failed to decode and were replaced under skip_bad since the
 * dataset was loaded (each counted once); 0 for an in-memory dataset.
 */
RP_API int64_t rp_dataset_bad_files(const rp_dataset *ds);

/* Frees a dataset and its pixels and labels. NULL is allowed and ignored. */
RP_API void rp_dataset_destroy(rp_dataset *ds);

/*
 * Computes, for each channel k in [0, ds->c), the mean and the (population)
 * standard deviation of the pixel values scaled to [0, 1] over all samples
 * and positions, in double precision. The results are written to mean[k] and
 * std[k]; both arrays are provided by the caller and hold ds->c floats.
 * A dataset of image files is not scanned (that would decode every file):
 * its configuration's mean and std (ImageNet's by default) are returned.
 * Errors: RP_ERR_INVALID for a NULL argument or an empty dataset;
 * RP_ERR_NOMEM.
 */
RP_API rp_status rp_dataset_channel_stats(const rp_dataset *ds, float *mean, float *std);

#ifdef __cplusplus
}
#endif
#endif
