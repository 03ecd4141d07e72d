# Sourced by the GPU scripts (scripts/*-gpu.sh, gpu-check.sh, gpu-label.sh): the CUDA build in build/cuda, preset
# `cuda` without the Python extension, with every core, its logs in $out (which the caller sets).
#   build_cuda [--log-prefix P] [-DVAR=VALUE ...] [TARGET ...]
# configures (the -D arguments added to the preset's), builds the targets (all of them when none is named), and on a
# failure prints the configure log's tail or the build's error lines and exits 1. Logs: $out/Pconfigure.log and
# $out/Pbuild.log.
build_cuda() {
  local prefix="" defines=() targets=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --log-prefix) prefix="$2"; shift ;;
      -D*) defines+=("$1") ;;
      *) targets+=("$1") ;;
    esac
    shift
  done
  cmake --preset cuda -DALPHA_PYTHON= "${defines[@]}" > "$out/${prefix}configure.log" 2>&1 ||
    { tail -30 "$out/${prefix}configure.log"; exit 1; }
  cmake --build build/cuda -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"} > "$out/${prefix}build.log" 2>&1 ||
    { grep -E "error" "$out/${prefix}build.log" | head -30; exit 1; }
}
