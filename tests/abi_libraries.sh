#!/usr/bin/env bash
# The libraries as a user links them: `cmake --install` into a temporary prefix, then
#  1. the core library needs no MuJoCo, EGL, cairo or giflib (readelf's NEEDED), while
#     libreplicator-extras needs cairo and giflib, and libreplicator-envs MuJoCo and EGL;
#  2. examples/mlp.c, linked with `pkg-config --libs replicator`, loads none of them (ldd, which
#     follows the libraries' own NEEDED entries) and trains;
#  3. a program that writes a TensorBoard events file, a chart and a GIF links with
#     `pkg-config --libs replicator-extras` and loads cairo but no MuJoCo or EGL; one that steps
#     a control task links with `pkg-config --libs replicator-envs` and loads MuJoCo but no
#     cairo; both run; and both again statically (replicator-extras-static, replicator-envs-static);
#  4. CMake's find_package(replicator COMPONENTS extras envs) gives replicator::extras and
#     replicator::envs (and, with static, the archives); an unknown component is refused.
# Usage: abi_libraries.sh BUILD_DIR SOURCE_DIR   (env: CC, RP_EXAMPLE_FLAGS for sanitizer builds)
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
cc=${CC:-cc}
# shellcheck disable=SC2206 # the flags are words
flags=(${RP_EXAMPLE_FLAGS:-})
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

prefix=$dir/prefix
cmake --install "$build" --prefix "$prefix" > /dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir replicator)
cd "$dir"

# 1. What each library records that it needs.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '; }
core=$(needed "$libdir/libreplicator.so")
extras=$(needed "$libdir/libreplicator-extras.so")
envs=$(needed "$libdir/libreplicator-envs.so")
case "$core" in *mujoco* | *EGL* | *cairo* | *libGL* | *libgif*) fail "libreplicator.so needs: $core" ;; esac
case "$extras" in *libcairo*libgif* | *libgif*libcairo*) ;; *) fail "libreplicator-extras.so does not need cairo and giflib: $extras" ;; esac
case "$extras" in *mujoco* | *EGL*) fail "libreplicator-extras.so needs MuJoCo or EGL: $extras" ;; esac
case "$envs" in *libmujoco*libEGL* | *libEGL*libmujoco*) ;; *) fail "libreplicator-envs.so: $envs" ;; esac
for part in extras envs; do
    case "$(needed "$libdir/libreplicator-$part.so")" in *libreplicator.so*) ;;
        *) fail "libreplicator-$part.so does not name the core library" ;; esac
done
echo "ok: NEEDED: libreplicator.so: $core"
echo "ok: NEEDED: libreplicator-extras.so: $extras"
echo "ok: NEEDED: libreplicator-envs.so: $envs"

# loads BINARY: the libraries the dynamic loader maps for it, by name.
loads() { LD_LIBRARY_PATH=$libdir ldd "$1" | awk '{print $1}' | tr '\n' ' '; }

# 2. An MLP: the core library only.
line=$(pkg-config --cflags --libs replicator)
# shellcheck disable=SC2086
"$cc" -std=c11 -O2 "${flags[@]}" "$src/examples/mlp.c" -o mlp $line -Wl,-rpath,"$libdir" -lm ||
    fail "examples/mlp.c does not build with: $line"
l=$(loads mlp)
case "$l" in *libreplicator.so*) ;; *) fail "mlp does not load libreplicator.so: $l" ;; esac
case "$l" in *mujoco* | *libEGL* | *cairo* | *replicator-extras* | *replicator-envs*)
    fail "an MLP loads more than the core: $l" ;; esac
out=$(./mlp --replicas 2) || fail "mlp: $out"
echo "$out" | grep -q '^replicas 2  test accuracy 0\.9[5-9]' || fail "mlp: $out"
echo "ok: examples/mlp.c ($line) loads no MuJoCo, EGL or cairo and trains: ${out##*$'\n'}"

# 3. The optional libraries, each on its own.
cat > extras.c << 'C'
#include <stdio.h>
#include <replicator/replicator.h>
int main(int argc, char **argv)
{
    rp_tensorboard *tb;
    if (rp_tensorboard_create(&tb, argv[1]) != RP_OK ||
        rp_tensorboard_add_scalar(tb, "train/loss", 1, 0.5) != RP_OK ||
        rp_tensorboard_destroy(tb) != RP_OK) {
        fprintf(stderr, "tensorboard: %s\n", rp_last_error());
        return 1;
    }
    double x[3] = {0, 1, 2}, y[3] = {1, 4, 9};
    rp_plot_series s = {"y", x, y, 3};
    rp_plot p = {.title = "extras"};
    char path[4096];
    snprintf(path, sizeof path, "%s/chart.png", argv[1]);
    if (rp_plot_write_png(path, &p, &s, 1) != RP_OK) {
        fprintf(stderr, "plot: %s\n", rp_last_error());
        return 1;
    }
    snprintf(path, sizeof path, "%s/episode.gif", argv[1]);
    uint8_t rgb[4 * 4 * 3] = {255, 0, 0};
    rp_gif *g;
    if (rp_gif_create(&g, path, 4, 4) != RP_OK || rp_gif_add_frame(g, rgb, 10) != RP_OK ||
        rp_gif_close(g) != RP_OK) {
        fprintf(stderr, "gif: %s\n", rp_last_error());
        return 1;
    }
    printf("extras: events file, chart and GIF written\n");
    return argc == 2 ? 0 : 1;
}
C
cat > envs.c << 'C'
#include <stdio.h>
#include <replicator/replicator.h>
int main(void)
{
    rp_rl_env *env;
    float obs[RP_ENV_MAX_OBS], act[RP_ENV_MAX_ACT] = {0};
    rp_env_step_result r;
    if (rp_env_create(&env, "cartpole-swingup", NULL) != RP_OK ||
        rp_env_reset(env, 1, obs) != RP_OK ||
        rp_env_step(env, act, rp_env_get_spec(env)->act_dim, obs, &r) != RP_OK) {
        fprintf(stderr, "env: %s\n", rp_last_error());
        return 1;
    }
    printf("envs: %d tasks, one step of cartpole-swingup, reward %.3f\n", rp_env_task_count(),
           r.reward);
    rp_env_destroy(env);
    return 0;
}
C
for part in extras envs; do
    line=$(pkg-config --cflags --libs replicator-$part)
    # shellcheck disable=SC2086
    "$cc" -std=c11 -Wall -Wextra -Werror -O2 "${flags[@]}" $part.c -o $part $line \
        -Wl,-rpath,"$libdir" || fail "$part.c does not build with: $line"
    # shellcheck disable=SC2046
    "$cc" -std=c11 -O2 "${flags[@]}" $part.c -o $part-static \
        $(pkg-config --cflags --libs replicator-$part-static) || fail "the static $part line is incomplete"
    readelf -d $part-static | grep -q 'NEEDED.*libreplicator' && fail "$part-static linked a shared replicator"
    echo "ok: $part.c builds with: $line"
done
l=$(loads extras)
case "$l" in *libreplicator-extras.so*libcairo* | *libcairo*libreplicator-extras.so*) ;;
    *) fail "extras does not load libreplicator-extras and cairo: $l" ;; esac
case "$l" in *mujoco* | *libEGL*) fail "extras loads MuJoCo or EGL: $l" ;; esac
l=$(loads envs)
case "$l" in *libreplicator-envs.so*libmujoco* | *libmujoco*libreplicator-envs.so*) ;;
    *) fail "envs does not load libreplicator-envs and MuJoCo: $l" ;; esac
case "$l" in *cairo*) fail "envs loads cairo: $l" ;; esac
for b in extras extras-static; do
    mkdir "out-$b"
    out=$(./$b "out-$b") || fail "$b: $out"
    if ! [ -s "out-$b/chart.png" ] || ! [ -s "out-$b/episode.gif" ] ||
        ! ls "out-$b"/events.out.tfevents.* > /dev/null 2>&1; then
        fail "$b wrote: $(ls "out-$b")"
    fi
done
for b in envs envs-static; do
    out=$(./$b) || fail "$b: $out"
    echo "$out" | grep -q '^envs: [0-9]* tasks, one step of cartpole-swingup' || fail "$b: $out"
done
echo "ok: extras and envs, shared and static, run; extras loads no MuJoCo or EGL, envs no cairo"

# 4. CMake components.
mkdir proj
cp extras.c envs.c proj/
cat > proj/CMakeLists.txt << 'CM'
cmake_minimum_required(VERSION 3.20)
project(parts LANGUAGES C)
option(STATIC "the archives" OFF)
if(STATIC)
  find_package(replicator 0.1 REQUIRED COMPONENTS static extras envs)
  set(x _static)
else()
  find_package(replicator 0.1 REQUIRED COMPONENTS extras envs)
  set(x "")
endif()
add_executable(extras extras.c)
target_link_libraries(extras PRIVATE replicator::extras${x})
add_executable(envs envs.c)
target_link_libraries(envs PRIVATE replicator::envs${x})
CM
for kind in shared static; do
    static=OFF
    [ $kind = static ] && static=ON
    cmake -S proj -B "cm-$kind" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_C_FLAGS="${flags[*]}" -DSTATIC=$static > "cm-$kind.log" 2>&1 ||
        { cat "cm-$kind.log"; fail "find_package(replicator COMPONENTS extras envs) ($kind)"; }
    cmake --build "cm-$kind" > "cm-$kind.log" 2>&1 || { cat "cm-$kind.log"; fail "the $kind components do not build"; }
    mkdir "out-cm-$kind"
    "cm-$kind/extras" "out-cm-$kind" > /dev/null || fail "cm-$kind/extras"
    "cm-$kind/envs" > /dev/null || fail "cm-$kind/envs"
    if [ $kind = static ]; then
        readelf -d cm-static/envs | grep -q 'NEEDED.*libreplicator' && fail "the static components linked a shared replicator"
    else
        case "$(loads cm-shared/envs)" in *libreplicator-envs.so*) ;; *) fail "cm-shared/envs: $(loads cm-shared/envs)" ;; esac
    fi
done
mkdir bad
cat > bad/CMakeLists.txt << 'CM'
cmake_minimum_required(VERSION 3.20)
project(bad LANGUAGES C)
find_package(replicator 0.1 REQUIRED COMPONENTS plots)
CM
cmake -S bad -B bad-build -DCMAKE_PREFIX_PATH="$prefix" > bad.log 2>&1 &&
    fail "find_package(replicator COMPONENTS plots) configured"
echo "ok: find_package(replicator COMPONENTS extras envs), shared and static; an unknown component is refused"
echo "PASS"
