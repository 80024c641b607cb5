/*
 * plot_internal.h - the layout rp_plot_write_png draws with, so that a test
 * can find where a data point should land in the picture.
 */
#ifndef RP_IO_PLOT_INTERNAL_H
#define RP_IO_PLOT_INTERNAL_H

#include "replicator/io.h"

typedef struct io_plot_frame {
    int width, height;               /* the picture, pixels */
    double left, top, right, bottom; /* the plot area, pixel coordinates (y grows down) */
    double xlo, xhi, xstep;          /* the x axis: range and tick spacing */
    double ylo, yhi, ystep;          /* the y axis */
} io_plot_frame;

/*
 * The frame rp_plot_write_png(path, p, s, nseries) would draw, for arguments
 * it accepts. Errors: those of rp_plot_write_png's argument checks,
 * RP_ERR_BACKEND (cairo failed).
 */
rp_status io_plot_layout(const rp_plot *p, const rp_plot_series *s, int nseries, io_plot_frame *f);

/* Where data (x, y) lands in the picture, in pixel coordinates. */
static inline double io_plot_px(const io_plot_frame *f, double x)
{
    return f->left + (x - f->xlo) / (f->xhi - f->xlo) * (f->right - f->left);
}
static inline double io_plot_py(const io_plot_frame *f, double y)
{
    return f->bottom - (y - f->ylo) / (f->yhi - f->ylo) * (f->bottom - f->top);
}

#endif
