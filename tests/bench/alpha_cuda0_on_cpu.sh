#!/usr/bin/env sh
# `alpha` ($ALPHA) training on the CPU what bench/ab_train.py asks of cuda:0: a variant for its --clocks on a machine
# without a GPU (the clocks come from a stand-in nvidia-smi, tests/bench/fake_nvidia_smi).
for arg in "$@"; do
  shift
  [ "$arg" = cuda:0 ] && arg=cpu
  set -- "$@" "$arg"
done
exec "$ALPHA" "$@"
