#!/usr/bin/env bash
# Headless rendering needs EGL and Mesa's software rasterizer. Install them on Debian/Ubuntu
# when they are missing and we are allowed to (root); otherwise say what is needed.
set -euo pipefail
if ldconfig -p 2>/dev/null | grep -q "libEGL.so.1" && ldconfig -p | grep -q "libGL.so.1"; then
    exit 0
fi
pkgs="libegl1 libgl1 libgles2 libgl1-mesa-dri"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing EGL/Mesa for headless rendering: $pkgs"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs
else
    echo "warning: EGL not found; rendering needs: $pkgs (apt) or set MUJOCO_GL=osmesa" >&2
fi
