# Sourced by the GPU-machine scripts: unpacks the Debian packages in $DEBS (default .ext/debs; the
# GPU machine has no package registry) into $DEPS_ROOT unless DEPS_ROOT is set already, and points
# the build (make DEPS_ROOT=...) and the loader at them.
if [ -z "${DEPS_ROOT:-}" ]; then
    DEPS_ROOT=/tmp/zy_deps
    mkdir -p "$DEPS_ROOT"
    for f in "${DEBS:-.ext/debs}"/*.deb; do dpkg -x "$f" "$DEPS_ROOT"; done
fi
export DEPS_ROOT
L=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openblas-openmp:${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
