/*
 * plot.c - line charts as PNG files, drawn with cairo.
 *
 * The picture is laid out from the outside in: the title and the x axis's
 * labels fix the plot area's height, which fixes the y ticks, whose widest
 * label fixes the left margin, which fixes the width and the x ticks. Both
 * the writer and io_plot_layout (for tests) run the same layout function on
 * a cairo context with the same fonts, so they agree to the pixel. cairo
 * encodes the PNG into memory and the atomic file writer puts it in place,
 * so a failed write never leaves a partial file.
 */
#include <cairo/cairo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/plot_internal.h"

#define PLOT_DEFAULT_W 800
#define PLOT_DEFAULT_H 500
#define PLOT_VALUE_MAX 1e300 /* beyond this, differences of values could overflow */
#define PLOT_FONT      "sans-serif"
#define PLOT_LABEL_MAX 64 /* bytes of a tick label or a "series k" name */
#define PLOT_PALETTE_N 10

/* Matplotlib's "tab10" colours: distinct, readable on white, and familiar to readers of plots. */
static const double palette[PLOT_PALETTE_N][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
    {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812},
};

/* Sizes in pixels, scaled with the picture so that a large chart is not all margin. */
typedef struct plot_style {
    double title_px, label_px, tick_px; /* font sizes */
    double pad, tick_len, line_w;
} plot_style;

/* One axis: the range, the tick spacing and how its labels are written. */
typedef struct plot_axis {
    double lo, hi, step;
    double unit;        /* labels show value / unit ... */
    const char *suffix; /* ... followed by this ("k", "M", "G" or "") */
    int decimals;
} plot_axis;

static bool usable(double x, double y)
{
    return isfinite(x) && isfinite(y) && fabs(x) <= PLOT_VALUE_MAX && fabs(y) <= PLOT_VALUE_MAX;
}

static bool has_text(const char *s)
{
    return s && *s;
}

static rp_status check_text(const char *who, const char *what, const char *s)
{
    if (s && !rp_utf8_valid(s, strlen(s)))
        return RP_ERROR(RP_ERR_INVALID, "%s: the %s is not valid UTF-8", who, what);
    return RP_OK;
}

/* The checks rp_plot_write_png and io_plot_layout share; `who` starts each message. */
static rp_status check_args(const char *who, const rp_plot *p, const rp_plot_series *s, int nseries)
{
    if (!p) return RP_ERROR(RP_ERR_INVALID, "%s: p (the plot's settings) is NULL", who);
    if (nseries < 0)
        return RP_ERROR(RP_ERR_INVALID, "%s: nseries is %d, expected >= 0", who, nseries);
    if (nseries > 0 && !s)
        return RP_ERROR(RP_ERR_INVALID, "%s: s is NULL with nseries %d", who, nseries);
    const int sides[2] = {p->width, p->height};
    const char *names[2] = {"width", "height"};
    for (int k = 0; k < 2; k++)
        if (sides[k] != 0 && (sides[k] < RP_PLOT_MIN_SIDE || sides[k] > RP_PLOT_MAX_SIDE))
            return RP_ERROR(RP_ERR_INVALID, "%s: %s is %d, expected 0 (the default) or %d..%d", who,
                            names[k], sides[k], RP_PLOT_MIN_SIDE, RP_PLOT_MAX_SIDE);
    RP_CHECK(check_text(who, "title", p->title));
    RP_CHECK(check_text(who, "x label", p->xlabel));
    RP_CHECK(check_text(who, "y label", p->ylabel));
    for (int i = 0; i < nseries; i++) {
        if (s[i].n < 0)
            return RP_ERROR(RP_ERR_INVALID, "%s: series %d has n %d, expected >= 0", who, i,
                            s[i].n);
        if (s[i].n > 0 && (!s[i].x || !s[i].y))
            return RP_ERROR(RP_ERR_INVALID, "%s: series %d has n %d but %s is NULL", who, i, s[i].n,
                            !s[i].x ? "x" : "y");
        char what[48];
        snprintf(what, sizeof what, "label of series %d", i);
        RP_CHECK(check_text(who, what, s[i].label));
    }
    return RP_OK;
}

/* ---- axes ------------------------------------------------------------------------ */

/* 1, 2 or 5 times a power of ten, near raw (> 0). */
static double nice_step(double raw)
{
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * mag;
}

/*
 * Fits an axis around [lo, hi] with about `target` ticks. An empty or
 * degenerate range is widened first: a constant v gets v +- max(0.5,
 * 5% of |v|), so 0.5 gives 0..1 and a large constant still gets a sensible
 * scale.
 */
static void axis_fit(plot_axis *a, double lo, double hi, double target)
{
    if (!(hi - lo > 1e-9 * fmax(fabs(lo), fabs(hi)))) {
        double v = 0.5 * (lo + hi), pad = fmax(0.5, 0.05 * fabs(v));
        lo = v - pad;
        hi = v + pad;
    }
    if (target < 2) target = 2;
    a->step = nice_step((hi - lo) / target);
    a->lo = floor(lo / a->step + 1e-9) * a->step;
    a->hi = ceil(hi / a->step - 1e-9) * a->step;
    /* Long numbers (10,000 and up) in thousands, millions or billions: 200k, 1.5M. */
    double maxabs = fmax(fabs(a->lo), fabs(a->hi));
    static const double units[3] = {1e9, 1e6, 1e3};
    static const char *suffixes[3] = {"G", "M", "k"};
    a->unit = 1.0;
    a->suffix = "";
    if (maxabs >= 1e4)
        for (int k = 0; k < 3; k++)
            if (maxabs >= units[k] * (1 - 1e-9)) {
                a->unit = units[k];
                a->suffix = suffixes[k];
                break;
            }
    int d = -(int)floor(log10(a->step / a->unit) + 1e-9);
    a->decimals = d < 0 ? 0 : d > 15 ? 15 : d;
}

static int axis_ticks(const plot_axis *a)
{
    return (int)floor((a->hi - a->lo) / a->step + 0.5) + 1;
}

static double axis_tick(const plot_axis *a, int k)
{
    double v = a->lo + k * a->step;
    return fabs(v) < 1e-9 * a->step ? 0.0 : v; /* no "-0" */
}

/* A tick label, with a typographic minus sign. */
static void axis_label(const plot_axis *a, double v, char *buf, size_t size)
{
    double m = fabs(v) / a->unit;
    if (m == 0 && *a->suffix) { /* "0", not "0.0" beside "0.5M" */
        snprintf(buf, size, "0");
        return;
    }
    snprintf(buf, size, "%s%.*f%s", v < 0 ? "\xe2\x88\x92" : "", a->decimals, m,
             m == 0 ? "" : a->suffix);
}

/* ---- text ------------------------------------------------------------------------ */

static void set_font(cairo_t *cr, double px, bool bold)
{
    cairo_select_font_face(cr, PLOT_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, px);
}

static double text_width(cairo_t *cr, const char *s)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

/* Height of a line of the current font: ascent + descent. */
static double line_height(cairo_t *cr)
{
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    return fe.ascent + fe.descent;
}

/*
 * Draws s with its box's point (halign, valign) at (x, y): halign 0 left, 0.5
 * centre, 1 right; valign 0 top, 0.5 middle, 1 bottom of ascent + descent.
 */
static void show_text(cairo_t *cr, const char *s, double x, double y, double halign, double valign)
{
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double w = text_width(cr, s);
    cairo_move_to(cr, x - halign * w, y - valign * (fe.ascent + fe.descent) + fe.ascent);
    cairo_show_text(cr, s);
}

/* ---- layout ---------------------------------------------------------------------- */

static void data_range(const rp_plot_series *s, int nseries, double r[4])
{
    r[0] = r[2] = INFINITY;
    r[1] = r[3] = -INFINITY;
    for (int i = 0; i < nseries; i++)
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k];
            if (!usable(x, y)) continue;
            r[0] = fmin(r[0], x);
            r[1] = fmax(r[1], x);
            r[2] = fmin(r[2], y);
            r[3] = fmax(r[3], y);
        }
    if (r[0] > r[1]) { /* no points: a unit square */
        r[0] = r[2] = 0.0;
        r[1] = r[3] = 1.0;
    }
}

static plot_style style_for(int width, int height)
{
    double k = fmin(width / (double)PLOT_DEFAULT_W, height / (double)PLOT_DEFAULT_H);
    k = k < 0.8 ? 0.8 : k > 3.0 ? 3.0 : k; /* small charts keep readable text */
    return (plot_style){.title_px = 17 * k,
                        .label_px = 14 * k,
                        .tick_px = 12 * k,
                        .pad = 12 * k,
                        .tick_len = 5 * k,
                        .line_w = fmax(1.0, 2.0 * k)};
}

/* Sets f (and the axes) for a picture of f->width x f->height. */
static void layout(cairo_t *cr, const rp_plot *p, const rp_plot_series *s, int nseries,
                   const plot_style *st, io_plot_frame *f, plot_axis *ax, plot_axis *ay)
{
    double r[4];
    data_range(s, nseries, r);
    if (p->y_from_zero) {
        r[2] = fmin(r[2], 0.0);
        r[3] = fmax(r[3], 0.0);
        if (r[2] == 0.0 && r[3] == 0.0) r[3] = 1.0;
    }
    char buf[PLOT_LABEL_MAX];

    set_font(cr, st->tick_px, false);
    double tick_h = line_height(cr);
    double top = st->pad + 0.5 * tick_h; /* room for the top tick label's upper half */
    if (has_text(p->title)) {
        set_font(cr, st->title_px, true);
        top = fmax(top, st->pad + line_height(cr) + 0.8 * st->pad);
    }
    set_font(cr, st->label_px, false);
    double label_h = line_height(cr);
    double bottom = f->height - st->pad - tick_h - st->tick_len - 0.4 * st->pad;
    if (has_text(p->xlabel)) bottom -= label_h + 0.5 * st->pad;
    f->top = floor(top);
    f->bottom = floor(bottom);

    axis_fit(ay, r[2], r[3], (f->bottom - f->top) / (60.0 * st->tick_px / 12));
    set_font(cr, st->tick_px, false);
    double widest = 0;
    for (int k = 0; k < axis_ticks(ay); k++) {
        axis_label(ay, axis_tick(ay, k), buf, sizeof buf);
        widest = fmax(widest, text_width(cr, buf));
    }
    double left = st->pad + widest + st->tick_len + 0.4 * st->pad;
    if (has_text(p->ylabel)) left += label_h + 0.5 * st->pad;
    f->left = floor(left);

    /* The last x label is centred on the right edge: leave it room, then fit the ticks again. */
    double right = f->width - 1.5 * st->pad;
    for (int pass = 0; pass < 2; pass++) {
        axis_fit(ax, r[0], r[1], (right - f->left) / (100.0 * st->tick_px / 12));
        axis_label(ax, axis_tick(ax, axis_ticks(ax) - 1), buf, sizeof buf);
        right = fmin(right, f->width - st->pad - 0.5 * text_width(cr, buf));
    }
    f->right = floor(right);
    f->xlo = ax->lo;
    f->xhi = ax->hi;
    f->xstep = ax->step;
    f->ylo = ay->lo;
    f->yhi = ay->hi;
    f->ystep = ay->step;
}

/* ---- drawing --------------------------------------------------------------------- */

static void series_name(const rp_plot_series *s, int i, char *buf, size_t size)
{
    if (has_text(s[i].label))
        snprintf(buf, size, "%s", s[i].label);
    else
        snprintf(buf, size, "series %d", i + 1);
}

/* A crisp one-pixel line lies on a pixel's centre. */
static double snap(double v)
{
    return floor(v) + 0.5;
}

static void draw_axes(cairo_t *cr, const rp_plot *p, const plot_style *st, const io_plot_frame *f,
                      const plot_axis *ax, const plot_axis *ay)
{
    char buf[PLOT_LABEL_MAX];
    cairo_set_line_width(cr, 1.0);
    /* Grid lines at every tick, light enough to read the data over. */
    cairo_set_source_rgb(cr, 0.90, 0.90, 0.90);
    for (int k = 0; k < axis_ticks(ay); k++) {
        double y = snap(io_plot_py(f, axis_tick(ay, k)));
        cairo_move_to(cr, f->left, y);
        cairo_line_to(cr, f->right, y);
    }
    for (int k = 0; k < axis_ticks(ax); k++) {
        double x = snap(io_plot_px(f, axis_tick(ax, k)));
        cairo_move_to(cr, x, f->top);
        cairo_line_to(cr, x, f->bottom);
    }
    cairo_stroke(cr);

    /* Tick marks and their labels. */
    set_font(cr, st->tick_px, false);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    for (int k = 0; k < axis_ticks(ay); k++) {
        double v = axis_tick(ay, k), y = snap(io_plot_py(f, v));
        cairo_move_to(cr, f->left - st->tick_len, y);
        cairo_line_to(cr, f->left, y);
        cairo_stroke(cr);
        axis_label(ay, v, buf, sizeof buf);
        show_text(cr, buf, f->left - st->tick_len - 0.4 * st->pad, y, 1.0, 0.5);
    }
    for (int k = 0; k < axis_ticks(ax); k++) {
        double v = axis_tick(ax, k), x = snap(io_plot_px(f, v));
        cairo_move_to(cr, x, f->bottom);
        cairo_line_to(cr, x, f->bottom + st->tick_len);
        cairo_stroke(cr);
        axis_label(ax, v, buf, sizeof buf);
        show_text(cr, buf, x, f->bottom + st->tick_len + 0.4 * st->pad, 0.5, 0.0);
    }

    /* Axis labels and the title. */
    set_font(cr, st->label_px, false);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    if (has_text(p->xlabel))
        show_text(cr, p->xlabel, 0.5 * (f->left + f->right), f->height - st->pad, 0.5, 1.0);
    if (has_text(p->ylabel)) {
        cairo_save(cr);
        cairo_translate(cr, st->pad, 0.5 * (f->top + f->bottom));
        cairo_rotate(cr, -M_PI / 2);
        show_text(cr, p->ylabel, 0, 0, 0.5, 0.0);
        cairo_restore(cr);
    }
    if (has_text(p->title)) {
        set_font(cr, st->title_px, true);
        show_text(cr, p->title, 0.5 * (f->left + f->right), st->pad, 0.5, 0.0);
    }
}

/* The lines, clipped to the plot area widened by half a line so that data on an edge shows whole.
 */
static void draw_series(cairo_t *cr, const rp_plot_series *s, int nseries, const plot_style *st,
                        const io_plot_frame *f)
{
    cairo_save(cr);
    double m = 0.5 * st->line_w;
    cairo_rectangle(cr, f->left - m, f->top - m, f->right - f->left + 2 * m,
                    f->bottom - f->top + 2 * m);
    cairo_clip(cr);
    cairo_set_line_width(cr, st->line_w);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    for (int i = 0; i < nseries; i++) {
        const double *c = palette[i % PLOT_PALETTE_N];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        const double *x = s[i].x, *y = s[i].y;
        int n = s[i].n;
        for (int k = 0; k < n; k++) {
            if (!usable(x[k], y[k])) continue;
            bool prev = k > 0 && usable(x[k - 1], y[k - 1]);
            bool next = k + 1 < n && usable(x[k + 1], y[k + 1]);
            double px = io_plot_px(f, x[k]), py = io_plot_py(f, y[k]);
            if (prev)
                cairo_line_to(cr, px, py);
            else if (next)
                cairo_move_to(cr, px, py);
        }
        cairo_stroke(cr);
        /* A point alone between gaps is a dot: a line of one point would not show. */
        for (int k = 0; k < n; k++) {
            if (!usable(x[k], y[k]) || (k > 0 && usable(x[k - 1], y[k - 1])) ||
                (k + 1 < n && usable(x[k + 1], y[k + 1])))
                continue;
            cairo_new_sub_path(cr);
            cairo_arc(cr, io_plot_px(f, x[k]), io_plot_py(f, y[k]), 1.25 * st->line_w, 0, 2 * M_PI);
        }
        cairo_fill(cr);
    }
    cairo_restore(cr);

    /* The left and bottom axis lines over the data's ends. */
    cairo_set_line_width(cr, 1.0);
    cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
    cairo_move_to(cr, snap(f->left), f->top);
    cairo_line_to(cr, snap(f->left), snap(f->bottom));
    cairo_line_to(cr, f->right, snap(f->bottom));
    cairo_stroke(cr);
}

/* How many of the data's points and segment midpoints fall in a rectangle. */
static long count_inside(const rp_plot_series *s, int nseries, const io_plot_frame *f, double x0,
                         double y0, double x1, double y1)
{
    long n = 0;
    for (int i = 0; i < nseries; i++)
        for (int k = 0; k < s[i].n; k++) {
            if (!usable(s[i].x[k], s[i].y[k])) continue;
            double px = io_plot_px(f, s[i].x[k]), py = io_plot_py(f, s[i].y[k]);
            for (int t = 0; t < 4; t++) { /* the point and 3 steps towards the next */
                if (t > 0 && !(k + 1 < s[i].n && usable(s[i].x[k + 1], s[i].y[k + 1]))) break;
                double qx = px, qy = py;
                if (t > 0) {
                    qx += t / 4.0 * (io_plot_px(f, s[i].x[k + 1]) - px);
                    qy += t / 4.0 * (io_plot_py(f, s[i].y[k + 1]) - py);
                }
                n += qx >= x0 && qx <= x1 && qy >= y0 && qy <= y1;
            }
        }
    return n;
}

/* A legend in whichever corner of the plot area hides the least data (upper right on a tie). */
static void draw_legend(cairo_t *cr, const rp_plot_series *s, int nseries, const plot_style *st,
                        const io_plot_frame *f)
{
    char buf[256];
    set_font(cr, st->tick_px, false);
    double lh = line_height(cr), row = 1.45 * lh, sample = 2.2 * st->pad, gap = 0.6 * st->pad;
    double inner = 0.7 * st->pad, widest = 0;
    for (int i = 0; i < nseries; i++) {
        series_name(s, i, buf, sizeof buf);
        widest = fmax(widest, text_width(cr, buf));
    }
    double w = 2 * inner + sample + gap + widest, h = 2 * inner + (nseries - 1) * row + lh;
    double inset = 0.8 * st->pad;
    const double corners[4][2] = {{1, 0}, {0, 0}, {1, 1}, {0, 1}}; /* (right?, bottom?) */
    double bx = 0, by = 0;
    long best = -1;
    for (int c = 0; c < 4; c++) {
        double x0 = corners[c][0] ? f->right - inset - w : f->left + inset;
        double y0 = corners[c][1] ? f->bottom - inset - h : f->top + inset;
        long n = count_inside(s, nseries, f, x0, y0, x0 + w, y0 + h);
        if (best < 0 || n < best) {
            best = n;
            bx = x0;
            by = y0;
        }
    }
    bx = floor(bx) + 0.5;
    by = floor(by) + 0.5;
    cairo_rectangle(cr, bx, by, floor(w), floor(h));
    cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.80, 0.80, 0.80);
    cairo_set_line_width(cr, 1.0);
    cairo_stroke(cr);
    cairo_set_line_width(cr, st->line_w);
    for (int i = 0; i < nseries; i++) {
        double y = by + inner + i * row + 0.5 * lh;
        const double *c = palette[i % PLOT_PALETTE_N];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_move_to(cr, bx + inner, y);
        cairo_line_to(cr, bx + inner + sample, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
        series_name(s, i, buf, sizeof buf);
        show_text(cr, buf, bx + inner + sample + gap, y, 0.0, 0.5);
    }
}

/* ---- the calls ------------------------------------------------------------------- */

static void frame_size(const rp_plot *p, io_plot_frame *f)
{
    memset(f, 0, sizeof *f);
    f->width = p->width ? p->width : PLOT_DEFAULT_W;
    f->height = p->height ? p->height : PLOT_DEFAULT_H;
}

rp_status io_plot_layout(const rp_plot *p, const rp_plot_series *s, int nseries, io_plot_frame *f)
{
    if (!f) return RP_ERROR(RP_ERR_INVALID, "io_plot_layout: f is NULL");
    RP_CHECK(check_args("io_plot_layout", p, s, nseries));
    frame_size(p, f);
    /* Text is measured the same on any surface: a one-pixel one will do. */
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *cr = cairo_create(surface);
    plot_style st = style_for(f->width, f->height);
    plot_axis ax, ay;
    layout(cr, p, s, nseries, &st, f, &ax, &ay);
    cairo_status_t cs = cairo_status(cr);
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    if (cs != CAIRO_STATUS_SUCCESS)
        return RP_ERROR(RP_ERR_BACKEND, "io_plot_layout: cairo failed: %s",
                        cairo_status_to_string(cs));
    return RP_OK;
}

/* cairo's PNG encoder writes through this into a growing buffer. */
typedef struct png_buffer {
    unsigned char *data;
    size_t len, cap;
} png_buffer;

static cairo_status_t png_write_cb(void *closure, const unsigned char *bytes, unsigned int len)
{
    png_buffer *b = closure;
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? 2 * b->cap : 65536;
        while (cap - b->len < len)
            cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) return CAIRO_STATUS_NO_MEMORY;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, len);
    b->len += len;
    return CAIRO_STATUS_SUCCESS;
}

rp_status rp_plot_write_png(const char *path, const rp_plot *p, const rp_plot_series *s,
                            int nseries)
{
    rp_status status = RP_OK;
    if (!path || !*path)
        return RP_ERROR(RP_ERR_INVALID, "rp_plot_write_png: path is %s", path ? "empty" : "NULL");
    char who[64 + 4096];
    snprintf(who, sizeof who, "rp_plot_write_png %s", path);
    RP_CHECK(check_args(who, p, s, nseries));

    io_plot_frame f;
    frame_size(p, &f);
    png_buffer png = {0};
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, f.width, f.height);
    cairo_t *cr = cairo_create(surface);
    plot_style st = style_for(f.width, f.height);
    plot_axis ax, ay;

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    layout(cr, p, s, nseries, &st, &f, &ax, &ay);
    draw_axes(cr, p, &st, &f, &ax, &ay);
    draw_series(cr, s, nseries, &st, &f);
    if (nseries > 1) draw_legend(cr, s, nseries, &st, &f);
    cairo_status_t cs = cairo_status(cr);
    if (cs == CAIRO_STATUS_SUCCESS) {
        cairo_surface_flush(surface);
        cs = cairo_surface_write_to_png_stream(surface, png_write_cb, &png);
    }
    if (cs == CAIRO_STATUS_NO_MEMORY) {
        status = RP_ERROR(RP_ERR_NOMEM, "%s: out of memory drawing a %dx%d chart", who, f.width,
                          f.height);
        goto cleanup;
    }
    if (cs != CAIRO_STATUS_SUCCESS) {
        status = RP_ERROR(RP_ERR_BACKEND, "%s: cairo failed: %s", who, cairo_status_to_string(cs));
        goto cleanup;
    }
    RP_TRY(rp_file_write_atomic(path, "PNG chart", png.data, png.len));
cleanup:
    free(png.data);
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    return status;
}
