#!/usr/bin/env bash
# Installs the Debian packages Tandem builds and tests with. Safe to rerun:
# only missing packages are installed. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang libclang-rt-14-dev       # libFuzzer and sanitizer runtimes
  libhwloc-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev            # tandem serve
  openmpi-bin libopenmpi-dev    # --pipeline: stages over MPI (mpirun)
  python3
  librsvg2-bin                  # rsvg-convert: the bench chart test renders its SVG to PNG
  chromium chromium-driver fonts-dejavu-core  # the chat page's browser test (tests/serve/test_chat_page.py)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
