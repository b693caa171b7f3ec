#!/usr/bin/env bash
# swarmflow's two quick-start commands:
#   ./dev.sh main   install what is missing, build, run the main job (the inspection example)
#                   on the embedded default; its files go to build/out/
#   ./dev.sh ultrasound  the same for the ultrasound example (docs/ultrasound.md); its files go
#                   to build/out/
#   ./dev.sh test   install what is missing, build, run the whole test suite
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
build_dir="${SWARMFLOW_BUILD_DIR:-$root/build}"
# ccache: paths relative to the checkout, so clones share the cache.
export CCACHE_BASEDIR="$root"
export CCACHE_NOHASHDIR=true
jobs="${SWARMFLOW_JOBS:-$(nproc)}"

build() {
  "$root/scripts/bootstrap.sh"
  local extra=()
  if [ "${CI:-}" = "true" ]; then extra+=(-DSWARMFLOW_WERROR=ON); fi
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}"
  fi
  cmake --build "$build_dir" -j "$jobs" "$@"
}

cmd="${1:-main}"
shift || true
case "$cmd" in
  main)
    build
    mkdir -p "$build_dir/out"
    cd "$build_dir/out"
    echo "swarmflow: running pipelines/inspection.yaml; files go to $build_dir/out" >&2
    exec "$build_dir/src/cli/swarmflow" run "$root/pipelines/inspection.yaml" --report inspection-report.json "$@"
    ;;
  ultrasound)
    build
    mkdir -p "$build_dir/out"
    cd "$build_dir/out"
    echo "swarmflow: running pipelines/ultrasound.yaml; files go to $build_dir/out" >&2
    exec "$build_dir/src/cli/swarmflow" run "$root/pipelines/ultrasound.yaml" --report ultrasound-report.json "$@"
    ;;
  quickstart)
    build
    exec "$build_dir/src/cli/swarmflow" run "$root/pipelines/quickstart.yaml" "$@"
    ;;
  test)
    build
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
    ;;
  build)
    build "$@"
    ;;
  *)
    echo "usage: ./dev.sh main|ultrasound|test|build|quickstart" >&2
    exit 2
    ;;
esac
