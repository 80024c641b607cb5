/*
 * render.c - offscreen frames of a MuJoCo model through MuJoCo's renderer,
 * in a headless EGL context.
 *
 * The context comes from Mesa's surfaceless EGL platform: it needs no window
 * system and no GPU, so it works in containers and on batch nodes (Mesa
 * falls back to llvmpipe, its CPU rasteriser). The context has no default
 * framebuffer at all; MuJoCo draws into its own offscreen framebuffer
 * (mjFB_OFFSCREEN), from which mjr_readPixels copies the picture.
 *
 * MuJoCo's GL resources (the mjrContext: textures, meshes, the offscreen
 * buffer) and the scene (mjvScene) belong to one model, so they are made on
 * the first draw and again when a draw brings a different model. MuJoCo
 * loads the GL functions itself, through the current context's
 * eglGetProcAddress, so the library links libEGL only.
 *
 * The EGL display is opened once and shared by every renderer of the
 * process for its whole life, as EGL intends: eglTerminate would end every
 * context on it, and reopening it reloads and re-initialises the driver.
 */
#include <EGL/egl.h>
#include <EGL/eglext.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rl/render_internal.h"

#define GL_NO_ERROR_ 0 /* GL's constant, without GL's headers */

struct rp_renderer {
    int width, height;
    EGLContext ctx;
    const mjModel *model; /* the model the scene and the GL resources were made for */
    int model_nbody;      /* (a new model at a freed model's address differs in these, usually) */
    int model_ngeom;
    bool ready; /* scn and con are made */
    mjvScene scn;
    mjrContext con;
    mjvCamera cam;
    mjvOption opt;
    int track_body; /* the body the free camera follows (x and y), or -1 */
    uint8_t *flip;  /* [height, width, 3]: rows as GL gives them, bottom first */
};

/* ---- the shared display ----------------------------------------------------------- */

static pthread_mutex_t display_lock = PTHREAD_MUTEX_INITIALIZER;
static EGLDisplay display = EGL_NO_DISPLAY;
static EGLConfig display_config;
static bool display_open;

static const char *egl_error_name(EGLint e)
{
    switch (e) {
    case EGL_SUCCESS:
        return "EGL_SUCCESS";
    case EGL_NOT_INITIALIZED:
        return "EGL_NOT_INITIALIZED";
    case EGL_BAD_ACCESS:
        return "EGL_BAD_ACCESS";
    case EGL_BAD_ALLOC:
        return "EGL_BAD_ALLOC";
    case EGL_BAD_ATTRIBUTE:
        return "EGL_BAD_ATTRIBUTE";
    case EGL_BAD_CONFIG:
        return "EGL_BAD_CONFIG";
    case EGL_BAD_CONTEXT:
        return "EGL_BAD_CONTEXT";
    case EGL_BAD_DISPLAY:
        return "EGL_BAD_DISPLAY";
    case EGL_BAD_MATCH:
        return "EGL_BAD_MATCH";
    case EGL_BAD_PARAMETER:
        return "EGL_BAD_PARAMETER";
    default:
        return "an EGL error";
    }
}

/* Opens the shared display the first time; later calls find it open. */
static rp_status display_open_once(void)
{
    rp_status status = RP_OK;
    pthread_mutex_lock(&display_lock);
    if (display_open) goto done;
    const char *exts = eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
    if (!exts || !strstr(exts, "EGL_MESA_platform_surfaceless")) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED,
                          "rp_renderer_create: EGL has no EGL_MESA_platform_surfaceless (client "
                          "extensions: %s); install Mesa's EGL (libegl-mesa0, libgl1-mesa-dri)",
                          exts ? exts : "none");
        goto done;
    }
    PFNEGLGETPLATFORMDISPLAYEXTPROC get_display =
        (PFNEGLGETPLATFORMDISPLAYEXTPROC)eglGetProcAddress("eglGetPlatformDisplayEXT");
    EGLDisplay dpy = get_display
                         ? get_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, NULL)
                         : EGL_NO_DISPLAY;
    EGLint major = 0, minor = 0;
    if (dpy == EGL_NO_DISPLAY || !eglInitialize(dpy, &major, &minor)) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED,
                          "rp_renderer_create: cannot open Mesa's surfaceless EGL display: %s",
                          egl_error_name(eglGetError()));
        goto done;
    }
    /*
     * Desktop OpenGL (MuJoCo's). No surface will be made, but a config must name a surface type
     * and the default (window) has no configs on this platform: pbuffer ones it has.
     */
    const EGLint attrs[] = {EGL_RED_SIZE,
                            8,
                            EGL_GREEN_SIZE,
                            8,
                            EGL_BLUE_SIZE,
                            8,
                            EGL_DEPTH_SIZE,
                            24,
                            EGL_SURFACE_TYPE,
                            EGL_PBUFFER_BIT,
                            EGL_RENDERABLE_TYPE,
                            EGL_OPENGL_BIT,
                            EGL_NONE};
    EGLint n = 0;
    if (!eglChooseConfig(dpy, attrs, &display_config, 1, &n) || n < 1) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED,
                          "rp_renderer_create: EGL %d.%d has no config for desktop OpenGL with "
                          "8-bit RGB and a 24-bit depth buffer (%s)",
                          major, minor, egl_error_name(eglGetError()));
        eglTerminate(dpy);
        goto done;
    }
    display = dpy;
    display_open = true;
done:
    pthread_mutex_unlock(&display_lock);
    return status;
}

/* ---- the renderer ------------------------------------------------------------------ */

rp_status rp_renderer_create(rp_renderer **r, int width, int height)
{
    if (!r) return RP_ERROR(RP_ERR_INVALID, "rp_renderer_create: r is NULL");
    *r = NULL;
    if (width < 1 || height < 1 || width > RP_RENDER_MAX_SIDE || height > RP_RENDER_MAX_SIDE)
        return RP_ERROR(RP_ERR_INVALID,
                        "rp_renderer_create: size %dx%d, expected each side in 1..%d", width,
                        height, RP_RENDER_MAX_SIDE);
    rp_renderer *rr = rp_calloc(sizeof *rr);
    if (!rr) return RP_ERROR(RP_ERR_NOMEM, "rp_renderer_create: cannot allocate the renderer");
    rr->width = width;
    rr->height = height;
    rr->ctx = EGL_NO_CONTEXT;
    rr->flip = rp_alloc((size_t)width * (size_t)height * 3);
    if (!rr->flip) {
        rp_free(rr);
        return RP_ERROR(RP_ERR_NOMEM, "rp_renderer_create: cannot allocate a %dx%d frame", width,
                        height);
    }
    rp_status status = display_open_once();
    if (status != RP_OK) {
        rp_renderer_destroy(rr);
        return status;
    }
    if (!eglBindAPI(EGL_OPENGL_API) ||
        (rr->ctx = eglCreateContext(display, display_config, EGL_NO_CONTEXT, NULL)) ==
            EGL_NO_CONTEXT) {
        status = RP_ERROR(RP_ERR_UNSUPPORTED,
                          "rp_renderer_create: cannot create a desktop OpenGL context: %s",
                          egl_error_name(eglGetError()));
        rp_renderer_destroy(rr);
        return status;
    }
    *r = rr;
    return RP_OK;
}

/* Frees what belongs to the current model; the context must be current. */
static void free_model_state(rp_renderer *r)
{
    if (!r->ready) return;
    mjr_freeContext(&r->con);
    mjv_freeScene(&r->scn);
    r->ready = false;
    r->model = NULL;
}

void rp_renderer_destroy(rp_renderer *r)
{
    if (!r) return;
    if (r->ctx != EGL_NO_CONTEXT) {
        if (r->ready && eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, r->ctx)) {
            free_model_state(r);
            eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
        }
        eglDestroyContext(display, r->ctx);
    }
    rp_free(r->flip);
    rp_free(r);
}

/*
 * Makes the scene and GL resources for model m (the context is current).
 * MuJoCo's offscreen buffer takes its size from the model's visual settings
 * (offwidth, offheight; 640x480 unless the MJCF says otherwise), and this
 * MuJoCo (2.2) cannot resize it afterwards, so a renderer larger than that
 * makes the context from a copy of the model's top-level struct with a
 * larger size: mjr_makeContext only reads the model, and the copy's arrays
 * are the model's own. Multisampling is turned down to 4 samples at most.
 */
static rp_status prepare(rp_renderer *r, const mjModel *m)
{
    if (r->ready && r->model == m && r->model_nbody == m->nbody && r->model_ngeom == m->ngeom)
        return RP_OK;
    free_model_state(r);
    mjModel *view = malloc(sizeof *view);
    if (!view) return RP_ERROR(RP_ERR_NOMEM, "rp_renderer_draw: cannot allocate a model header");
    memcpy(view, m, sizeof *view);
    if (view->vis.global.offwidth < r->width) view->vis.global.offwidth = r->width;
    if (view->vis.global.offheight < r->height) view->vis.global.offheight = r->height;
    if (view->vis.quality.offsamples > 4) view->vis.quality.offsamples = 4;

    mjv_defaultScene(&r->scn);
    mjr_defaultContext(&r->con);
    mjv_makeScene(m, &r->scn, 2000);
    mjr_makeContext(view, &r->con, mjFONTSCALE_100);
    free(view);
    if (!r->con.offFBO) {
        mjv_freeScene(&r->scn);
        mjr_freeContext(&r->con);
        return RP_ERROR(RP_ERR_BACKEND,
                        "rp_renderer_draw: MuJoCo could not make its offscreen framebuffer of "
                        "%dx%d",
                        r->width, r->height);
    }
    mjr_setBuffer(mjFB_OFFSCREEN, &r->con);

    mjv_defaultOption(&r->opt);
    mjv_defaultCamera(&r->cam);
    r->track_body = -1;
    if (m->ncam > 0) {
        r->cam.type = mjCAMERA_FIXED;
        r->cam.fixedcamid = 0;
    } else {
        /*
         * A free camera at the model's scale that follows the first body. Not MuJoCo's tracking
         * camera: that one eases towards the body over several frames, so a single frame of a
         * state far from the last one would miss it.
         */
        mjv_defaultFreeCamera(m, &r->cam);
        if (m->nbody > 1) r->track_body = 1;
    }
    r->model = m;
    r->model_nbody = m->nbody;
    r->model_ngeom = m->ngeom;
    r->ready = true;
    return RP_OK;
}

rp_status rl_renderer_draw_mj(rp_renderer *r, const mjModel *m, mjData *d, uint8_t *rgb)
{
    if (!r || !m || !d || !rgb)
        return RP_ERROR(RP_ERR_INVALID, "rp_renderer_draw: %s is NULL",
                        !r   ? "r"
                        : !m ? "the model"
                        : !d ? "the data"
                             : "rgb");
    if (!eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, r->ctx))
        return RP_ERROR(RP_ERR_BACKEND,
                        "rp_renderer_draw: cannot make the GL context current on this thread: "
                        "%s (is another thread drawing with this renderer?)",
                        egl_error_name(eglGetError()));
    rp_status status = prepare(r, m);
    if (status == RP_OK) {
        mjrRect viewport = {0, 0, r->width, r->height};
        if (r->track_body >= 0) {
            r->cam.lookat[0] = d->xpos[3 * r->track_body];
            r->cam.lookat[1] = d->xpos[3 * r->track_body + 1];
        }
        /* The camera follows the state; mjv_updateScene reads d and writes only the scene. */
        mjv_updateScene(m, d, &r->opt, NULL, &r->cam, mjCAT_ALL, &r->scn);
        mjr_render(viewport, &r->scn, &r->con);
        mjr_readPixels(r->flip, NULL, viewport, &r->con);
        size_t row = (size_t)r->width * 3;
        for (int y = 0; y < r->height; y++)
            memcpy(rgb + (size_t)y * row, r->flip + (size_t)(r->height - 1 - y) * row, row);
        unsigned (*get_error)(void) = (unsigned (*)(void))eglGetProcAddress("glGetError");
        unsigned e = get_error ? get_error() : GL_NO_ERROR_;
        if (e != GL_NO_ERROR_)
            status =
                RP_ERROR(RP_ERR_BACKEND, "rp_renderer_draw: OpenGL error 0x%x while drawing", e);
    }
    eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
    return status;
}
