#!/usr/bin/env bash
# adapter_sweep.sh [OUT] [--set key=value ...]
#
# The quickstart task with LoRA, DoRA, PiSSA-initialized LoRA and full
# fine-tuning (same data, steps and seed). Writes OUT/results.md and
# OUT/loss.png.
# OUT defaults to sweeps/adapters; extra --set arguments apply to every run.
source "$(dirname "$0")/sweep_lib.sh"
out=${1:-sweeps/adapters}
shift || true
sweep_begin "$out" "Adapter sweep: LoRA, DoRA, PiSSA and full fine-tuning on the quickstart task"
sweep_run lora configs/quickstart.yaml "$@"
sweep_run dora configs/dora_quickstart.yaml "$@"
sweep_run pissa configs/pissa_quickstart.yaml "$@"
sweep_run full configs/quickstart.yaml --set adapter.type=none --set optimizer.lr=1.0e-3 "$@"
sweep_end
