/*
 * test_render.c - offscreen frames of a MuJoCo model (rp_renderer): a
 * cart-pole written here is drawn from its camera and from the free camera
 * a model without one gets; the frame is not blank, shows the pole moving
 * when the hinge angle changes, is the same for the same state, and works
 * larger than the model's own offscreen size. Skips (saying why) where no
 * headless GL context can be made.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/render_internal.h"

static const char *cartpole_xml =
    "<mujoco model='cartpole'>"
    "  <option timestep='0.01'/>"
    "  <worldbody>"
    "    <light name='light' pos='0 0 6'/>"
    "    %s"
    "    <geom name='floor' type='plane' pos='0 0 -0.05' size='4 4 .2' rgba='.2 .3 .4 1'/>"
    "    <body name='cart' pos='0 0 1'>"
    "      <joint name='slider' type='slide' axis='1 0 0'/>"
    "      <geom name='cart' type='box' size='0.2 0.15 0.1' mass='1' rgba='.7 .5 .3 1'/>"
    "      <body name='pole'>"
    "        <joint name='hinge' type='hinge' axis='0 1 0'/>"
    "        <geom name='pole' type='capsule' fromto='0 0 0 0 0 1' size='0.045' mass='0.1'"
    "              rgba='.9 .9 .2 1'/>"
    "      </body>"
    "    </body>"
    "  </worldbody>"
    "</mujoco>";

/* Loads the cart-pole, with a fixed camera in front of it or with none. */
static mjModel *load(bool camera)
{
    char xml[4096], path[512], err[1000] = "";
    snprintf(xml, sizeof xml, cartpole_xml,
             camera ? "<camera name='fixed' pos='0 -4 1' zaxis='0 -1 0'/>" : "");
    tu_tmp_path(path, sizeof path, camera ? "cam.xml" : "nocam.xml");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(xml, f);
    fclose(f);
    mjModel *m = mj_loadXML(path, NULL, err, sizeof err);
    if (!m) fprintf(stderr, "mj_loadXML: %s\n", err);
    assert_non_null(m);
    return m;
}

/* Creates a renderer, or skips the test when this machine has no headless GL. */
static rp_renderer *create_or_skip(int w, int h)
{
    rp_renderer *r = NULL;
    rp_status st = rp_renderer_create(&r, w, h);
    if (st == RP_ERR_UNSUPPORTED) {
        fprintf(stderr, "skipping: no headless GL context here: %s\n", rp_last_error());
        skip();
    }
    assert_int_equal(st, RP_OK);
    return r;
}

/* Pixels of the pole's yellow, however lit: R and G alike (unlike the orange cart), B low. */
static int yellow(const uint8_t *rgb, int w, int h, int x0, int x1)
{
    int n = 0;
    for (int y = 0; y < h; y++)
        for (int x = x0; x < x1; x++) {
            const uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            n += p[0] > 50 && abs(p[0] - p[1]) < p[0] / 6 && p[2] < p[0] / 2;
        }
    return n;
}

static int differing(const uint8_t *a, const uint8_t *b, int w, int h)
{
    int n = 0;
    for (int k = 0; k < w * h; k++)
        n += abs(a[3 * k] - b[3 * k]) + abs(a[3 * k + 1] - b[3 * k + 1]) +
                 abs(a[3 * k + 2] - b[3 * k + 2]) >
             30;
    return n;
}

/*
 * From the fixed camera: the upright pole is yellow in the middle third of
 * the frame; tilted 80 degrees towards +x it lies mostly in the right half,
 * and the frame changes; the same state draws the same frame.
 */
static void test_camera_frames(void **state)
{
    (void)state;
    enum { W = 160, H = 120 };
    rp_renderer *r = create_or_skip(W, H);
    mjModel *m = load(true);
    mjData *d = mj_makeData(m);
    uint8_t *a = malloc(W * H * 3), *b = malloc(W * H * 3), *c = malloc(W * H * 3);
    assert_true(a && b && c);

    mj_forward(m, d);
    assert_int_equal(rl_renderer_draw_mj(r, m, d, a), RP_OK);
    int mid = yellow(a, W, H, W / 3, 2 * W / 3), all = yellow(a, W, H, 0, W);
    assert_true(mid > 50);        /* the pole is there ... */
    assert_true(mid > 0.9 * all); /* ... and upright in the middle */

    d->qpos[1] = 1.4; /* the hinge: positive about +y turns the pole's top towards +x */
    mj_forward(m, d);
    assert_int_equal(rl_renderer_draw_mj(r, m, d, b), RP_OK);
    assert_true(differing(a, b, W, H) > 100);
    int right = yellow(b, W, H, W / 2 + 8, W), left = yellow(b, W, H, 0, W / 2 - 8);
    assert_true(right > 30);
    assert_true(right > 5 * left);

    assert_int_equal(rl_renderer_draw_mj(r, m, d, c), RP_OK);
    assert_int_equal(differing(b, c, W, H), 0);

    mj_deleteData(d);
    mj_deleteModel(m);
    rp_renderer_destroy(r);
    free(a);
    free(b);
    free(c);
}

/*
 * A model without a camera gets a free camera that follows the cart: the
 * pole stays in the picture when the cart slides far away. A second model in
 * the same renderer, and a frame larger than MuJoCo's default offscreen
 * buffer (640x480), filled to its corner.
 */
static void test_free_camera_and_size(void **state)
{
    (void)state;
    enum { W = 800, H = 600 };
    rp_renderer *r = create_or_skip(W, H);
    uint8_t *a = malloc(W * H * 3);
    assert_non_null(a);

    mjModel *m1 = load(true);
    mjData *d1 = mj_makeData(m1);
    mj_forward(m1, d1);
    assert_int_equal(rl_renderer_draw_mj(r, m1, d1, a), RP_OK);
    assert_true(yellow(a, W, H, 0, W) > 500);
    /* The bottom-right corner is the lit floor, not the black of an undrawn buffer. */
    const uint8_t *corner = a + ((size_t)(H - 2) * W + (W - 2)) * 3;
    assert_true(corner[0] + corner[1] + corner[2] > 30);

    mjModel *m = load(false);
    mjData *d = mj_makeData(m);
    d->qpos[0] = 30.0; /* far along the slider */
    mj_forward(m, d);
    assert_int_equal(rl_renderer_draw_mj(r, m, d, a), RP_OK);
    assert_true(yellow(a, W, H, 0, W) > 100);

    mj_deleteData(d);
    mj_deleteModel(m);
    mj_deleteData(d1);
    mj_deleteModel(m1);
    rp_renderer_destroy(r);
    free(a);
}

static void test_errors(void **state)
{
    (void)state;
    rp_renderer *r = (rp_renderer *)&r;
    assert_int_equal(rp_renderer_create(&r, 0, 10), RP_ERR_INVALID);
    tu_assert_error_contains("size 0x10");
    assert_null(r);
    assert_int_equal(rp_renderer_create(&r, 10, RP_RENDER_MAX_SIDE + 1), RP_ERR_INVALID);
    assert_int_equal(rp_renderer_create(NULL, 10, 10), RP_ERR_INVALID);
    rp_renderer_destroy(NULL);

    r = create_or_skip(32, 32);
    mjModel *m = load(true);
    mjData *d = mj_makeData(m);
    uint8_t rgb[32 * 32 * 3];
    assert_int_equal(rl_renderer_draw_mj(r, NULL, d, rgb), RP_ERR_INVALID);
    tu_assert_error_contains("model is NULL");
    assert_int_equal(rl_renderer_draw_mj(r, m, d, NULL), RP_ERR_INVALID);
    tu_assert_error_contains("rgb is NULL");
    assert_int_equal(rl_renderer_draw_mj(NULL, m, d, rgb), RP_ERR_INVALID);
    mj_deleteData(d);
    mj_deleteModel(m);
    rp_renderer_destroy(r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_camera_frames),
        cmocka_unit_test(test_free_camera_and_size),
        cmocka_unit_test(test_errors),
    };
    return tu_run_group_tests(argc, argv, tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
