#!/usr/bin/env sh
# `alpha` ($ALPHA) with another model seed: a variant for bench/ab_train.py whose losses differ from alpha's.
exec "$ALPHA" "$@" --seed 7
