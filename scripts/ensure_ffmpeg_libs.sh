#!/usr/bin/env bash
# LeRobot decodes videos with torchcodec, which loads the system's FFmpeg libraries (without
# them LeRobot falls back to PyAV, a slower reader). Install them on Debian/Ubuntu when they
# are missing and we are allowed to (root); otherwise say what is needed.
set -euo pipefail
if ldconfig -p 2>/dev/null | grep -q "libavcodec.so" && ldconfig -p | grep -q "libavfilter.so"; then
    exit 0
fi
pkgs="libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing FFmpeg's libraries for torchcodec: $pkgs"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
else
    echo "warning: FFmpeg's libraries not found; LeRobot will read videos with PyAV ($pkgs)" >&2
fi
