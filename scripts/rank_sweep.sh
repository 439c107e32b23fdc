#!/usr/bin/env bash
# rank_sweep.sh [OUT] [--set key=value ...]
#
# The quickstart LoRA at ranks 1, 2, 4, 8 and 16 (alpha = 2·r, so the
# adapter's scale stays the same). Writes OUT/results.md and OUT/loss.png.
# OUT defaults to sweeps/rank; extra --set arguments apply to every run.
source "$(dirname "$0")/sweep_lib.sh"
out=${1:-sweeps/rank}
shift || true
sweep_begin "$out" "LoRA rank sweep on the quickstart task"
for r in 1 2 4 8 16; do
	sweep_run "r$r" configs/quickstart.yaml --set adapter.r=$r --set adapter.alpha=$((2 * r)) "$@"
done
sweep_end
