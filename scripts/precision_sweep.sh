#!/usr/bin/env bash
# precision_sweep.sh [OUT [RECIPE]] [--set key=value ...]
#
# A fine-tune four ways: fp32, bf16, fp16 with dynamic loss scaling, and
# fp16 without it (bf16/fp16 emulated on the CPU exactly as a GPU rounds).
# Writes OUT/results.md (final validation loss, task accuracy, skipped
# steps, share of gradient values that are exactly zero, final loss scale,
# tokens/s, peak memory) and OUT/loss.png with the four loss curves.
# OUT defaults to sweeps/precision and RECIPE to configs/quickstart.yaml;
# extra --set arguments apply to every run.
source "$(dirname "$0")/sweep_lib.sh"
out=${1:-sweeps/precision}
recipe=${2:-configs/quickstart.yaml}
shift $(( $# < 2 ? $# : 2 ))
sweep_begin "$out" "Precision sweep: $recipe"
sweep_run fp32 "$recipe" --set precision=fp32 "$@"
sweep_run bf16 "$recipe" --set precision=bf16 "$@"
sweep_run fp16-scaled "$recipe" --set precision=fp16 --set amp.loss_scaling=on "$@"
sweep_run fp16-unscaled "$recipe" --set precision=fp16 --set amp.loss_scaling=off "$@"
sweep_end
