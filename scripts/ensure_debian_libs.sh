#!/usr/bin/env bash
# Usage: ensure_debian_libs.sh WHAT "LIB ..." "PKG ..."
# When any shared library LIB is missing from the linker cache (or, for an entry bin:NAME, the
# program NAME from PATH), install the Debian/Ubuntu packages PKG (as root, with apt);
# otherwise say what WHAT needs.
set -euo pipefail
what="$1"; libs="$2"; pkgs="$3"
missing=0
for lib in $libs; do
    case "$lib" in
        bin:*) command -v "${lib#bin:}" >/dev/null || missing=1 ;;
        *) ldconfig -p 2>/dev/null | grep -q "$lib" || missing=1 ;;
    esac
done
[ "$missing" = "0" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "installing $what: $pkgs"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
else
    echo "warning: libraries for $what not found; install: $pkgs (apt)" >&2
fi
