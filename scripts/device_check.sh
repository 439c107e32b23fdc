#!/usr/bin/env bash
# device_check.sh pack   here, with Go: builds what scripts/gpu_check.sh and
#                        scripts/bf16_device_check.sh build, plus gpu/vulkan's
#                        test binary, into one solid xz archive,
#                        .devcarry/bin.tar.xz (the device tool carries at most
#                        64 MiB with the repository: carry .devcarry)
# device_check.sh run    there, on an NVIDIA GPU host without Go (OUT names
#                        the folder for the logs): in about 250 s, at once,
#                        - cores 0-3: vkprobe (every GEMM variant checked
#                          against float64 and timed), TinyLlama-1.1B-shaped
#                          LoRA tokens/s on the Vulkan engine (fp32, bf16 on
#                          the tensor cores, bf16 on the scalar GEMM) and its
#                          per-kernel profile, PyTorch's bf16 eager on the
#                          same card, the per-op parity suite, quickstart
#                          training against the CPU engine, the tensor-core
#                          GEMM test, the tensor-core attention test and
#                          the attention benchmark (scalar and tensor-core
#                          kernels);
#                        - cores 4-13: the Llama-3.1-8B shape at 2 and 4
#                          layers, NF4 and bf16 base, one timed step each;
#                        - cores 14-15: scripts/bf16_device_check.sh (the
#                          bf16 units: AMX and VDPBF16PS tests and GEMMs).
# How the 2026-11-26 H100 figures in docs/gpus.md and docs/mixed-precision.md
# were made.
set -uo pipefail
cd "$(dirname "$0")/.."

pack() {
	set -e
	rm -f .devcarry/gpucheck/*.xz .devcarry/bf16/*.xz .devcarry/bin.tar.xz
	bash scripts/gpu_check.sh build >/dev/null
	bash scripts/bf16_device_check.sh build >/dev/null
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o .devcarry/gpucheck/vulkan.test ./gpu/vulkan
	cd .devcarry
	for f in gpucheck/*.xz bf16/*.xz; do xz -d -f "$f"; done
	local bins=(gpucheck/mixtune gpucheck/vkprobe gpucheck/train.test gpucheck/vkengine.test gpucheck/vulkan.test bf16/bf16.test bf16/nn.test)
	tar cf - "${bins[@]}" | xz -9e --lzma2=dict=64MiB -T2 >bin.tar.xz
	rm -f "${bins[@]}"
	du -sh bin.tar.xz .
}

gpu() {
	local tiny="--vocab 32000 --dim 2048 --layers 22 --heads 32 --seq 2048 --batch 1" run name
	echo "== vkprobe $(date +%T)"
	timeout 60 "$G/vkprobe" -device "$uuid" -sizes 4096 2>&1 | grep -v "cooperative-matrix shape" | grep -v " ok: worst"
	for run in "fp32" "bf16 --precision bf16 --base-dtype bf16" "bf16-scalar --precision bf16 --base-dtype bf16 --scalar-gemm"; do
		set -- $run
		name=$1
		shift
		echo "mixtune tinyllama $name: $(timeout 35 "$M" bench $tiny --ffn 5632 --steps 3 --warmup 1 --vulkan-device "$uuid" "$@" --json 2>&1 | tail -1)"
	done
	for run in "fp32" "bf16 --precision bf16 --base-dtype bf16"; do
		set -- $run
		name=$1
		shift
		echo "== mixtune tinyllama $name, profiled $(date +%T)"
		timeout 35 "$M" bench $tiny --ffn 5632 --steps 2 --warmup 1 --vulkan-device "$uuid" "$@" --profile 2>&1 | tail -34
	done
	echo "== PyTorch tinyllama bf16 eager $(date +%T)"
	timeout 40 python3 "$G/torch_peer.py" $tiny --hidden 5632 --steps 3 --adapters lora --modes bf16 --device cuda --base-dtype bf16 2>&1 | tail -1
	echo "== per-op parity suite $(date +%T)"
	(cd gpu/vkengine && timeout 40 "$G/vkengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- FAIL|ok|FAIL|PASS)")
	echo "== training against the CPU $(date +%T)"
	(cd train && timeout 40 "$G/train.test" -test.run '^TestVulkanQuickstartMatchesCPU$' -test.v 2>&1 | grep -E "^--- |worst relative")
	echo "== TestGemmTensorCores $(date +%T)"
	(cd gpu/vulkan && timeout 30 "$G/vulkan.test" -test.run '^TestGemmTensorCores$' -test.v 2>&1 | grep -E "^--- |worst|variant|FAIL|PASS" | grep -v "    --- PASS")
	echo "== TestAttentionTensorCores $(date +%T)"
	(cd gpu/vulkan && MIXTUNE_VK_DEVICE=$uuid timeout 40 "$G/vulkan.test" -test.run '^TestAttentionTensorCores$' -test.v 2>&1 | grep -E "^--- |worst|products|FAIL|PASS|differs")
	echo "== attention benchmark (scalar and coopmat kernels) $(date +%T)"
	(cd gpu/vulkan && MIXTUNE_VK_DEVICE=$uuid timeout 40 "$G/vulkan.test" -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 10x 2>&1 | grep -E "Benchmark|FAIL")
	echo "gpu done $(date +%T)"
}

llama8b() {
	local layers base
	for layers in 2 4; do
		for base in "--quantize nf4" ""; do
			echo "== 8B shape, $layers layers, bf16 base ${base:-only}: $(date +%T)"
			timeout 120 "$M" bench --vocab 128256 --dim 4096 --layers "$layers" --heads 32 --kv-heads 8 --ffn 14336 --seq 2048 --batch 1 \
				--checkpoint --threads 10 --steps 1 --warmup 1 --base-dtype bf16 $base --json 2>&1 | tail -2
		done
	done
	echo "8B done $(date +%T)"
}

run() {
	: "${OUT:?OUT must name a folder for the logs}"
	unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
	export PYTHONUNBUFFERED=1
	tar xJf .devcarry/bin.tar.xz -C .devcarry
	chmod +x .devcarry/gpucheck/* .devcarry/bf16/*
	G=$PWD/.devcarry/gpucheck M=$PWD/.devcarry/gpucheck/mixtune
	if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
		for f in .devcarry/gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
	[[ -e $icd ]] && export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | tr -d ' ')
	echo "start $(date +%T) $uuid $(nvidia-smi --query-gpu=name --format=csv,noheader)"
	export -f gpu llama8b
	export G M uuid
	taskset -c 0-3 timeout 250 bash -c gpu >"$OUT/gpu.log" 2>&1 &
	taskset -c 4-13 timeout 250 bash -c llama8b >"$OUT/llama8b.log" 2>&1 &
	(taskset -c 14,15 timeout 200 bash scripts/bf16_device_check.sh run .devcarry/bf16 >"$OUT/bf16.log" 2>&1) &
	wait
	echo "end $(date +%T): logs in $OUT (gpu.log, llama8b.log, bf16.log)"
}

case "${1:-}" in
pack) pack ;;
run) run ;;
*)
	echo "usage: $0 pack|run" >&2
	exit 2
	;;
esac
