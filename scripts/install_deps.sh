#!/usr/bin/env bash
# Installs the Debian packages zayac needs to build, test and run its default job, if missing.
set -euo pipefail
pkgs=(gcc make libcjson-dev libopenblas-openmp-dev libcmocka-dev libpcre2-dev fortunes fortune-mod python3
      openmpi-bin libopenmpi-dev zlib1g-dev libzstd-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
