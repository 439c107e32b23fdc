#!/usr/bin/env bash
# gpu_check.sh: the checks of the Vulkan engine on an NVIDIA GPU host that has
# PyTorch (and transformers and PEFT) but no Go and maybe no Vulkan loader.
#
#   scripts/gpu_check.sh build   here, with Go: builds into .devcarry/gpucheck/
#                                the static binaries the host runs (mixtune,
#                                vkprobe, the test binaries of gpu/vkengine
#                                and train; xz-compressed) with torch_peer.py,
#                                and downloads Debian's Vulkan loader and glvnd
#                                into .devcarry/gl/ (both ignored by git: carry
#                                .devcarry with the device tool)
#   scripts/gpu_check.sh run     there, from the repository root: prints
#                                the device as NVIDIA's Vulkan driver reports
#                                it and whether its UUID is nvidia-smi's; the
#                                per-op parity suite; 20 quickstart-shaped
#                                steps' losses against the CPU engine's (and a
#                                resume across engines); each GEMM variant's
#                                parity and TFLOP/s (tensor cores included);
#                                tokens/s
#                                on the bench, mid, smollm2 and TinyLlama-1.1B
#                                shapes against PyTorch on the same GPU
#                                (torch_peer.py --device cuda --base-dtype bf16,
#                                eager and --sdpa); the interop part below;
#                                within about 8 minutes.
#                                GPU_CHECK_SHAPES narrows the shapes timed,
#                                GPU_CHECK_PRECISIONS the runs of each (fp32
#                                bf16 bf16-scalar: bf16 off the tensor cores).
#   scripts/gpu_check.sh interop there (run runs it too): PEFT runs mixtune's
#                                adapters, transformers runs `mixtune merge`
#                                output, mixtune evaluates and trains from
#                                adapters PEFT saved (scripts/interop_check.py,
#                                on the CPU in float64); the goldens come back
#                                as $GPU_CHECK_OUT/interop.tgz (default
#                                /tmp/gpucheck-out), repository-relative: tar
#                                xzf it in the repository root and commit
#                                cmd/mixtune/testdata/interop/golden, which
#                                cmd/mixtune's TestInterop* check in CI.
#
# Each part runs under its own time limit and says so when it is cut; the
# script goes on to the next part. Nothing here needs the network.
set -uo pipefail
cd "$(dirname "$0")/.."
out=.devcarry/gpucheck

build() {
	set -e
	mkdir -p "$out" .devcarry/gl
	grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >>.git/info/exclude
	export CGO_ENABLED=0
	go build -ldflags="-s -w" -o "$out/mixtune" ./cmd/mixtune
	go build -ldflags="-s -w" -o "$out/vkprobe" ./gpu/vulkan/cmd/vkprobe
	for p in gpu/vkengine train; do
		go test -c -ldflags="-s -w" -o "$out/$(basename "$p").test" "./$p"
	done
	# the carried tree (the repository's 37 MB included) is limited to
	# 64 MiB: the binaries travel xz-compressed
	xz -f -9 "$out/mixtune" "$out/vkprobe" "$out"/*.test
	cp ../shared/bench/torch_peer.py "$out/" 2>/dev/null || echo "gpu_check: ../shared/bench/torch_peer.py not found: the PyTorch comparison will be skipped" >&2
	if ! ls .devcarry/gl/libvulkan1_*.deb >/dev/null 2>&1; then
		o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
		mkdir -p /tmp/amd64/partial
		apt-get $o update -qq && (cd .devcarry/gl && apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
	fi
	du -sh "$out" .devcarry/gl
}

# part NAME SECONDS COMMAND...: runs a part under its time limit.
source scripts/part.sh

# interop: transformers and PEFT against mixtune, into interop.tgz.
interop() {
	[[ -e $out/mixtune ]] || xz -d -k "$out/mixtune.xz"
	chmod +x "$out/mixtune"
	local dest=${GPU_CHECK_OUT:-/tmp/gpucheck-out} golden=cmd/mixtune/testdata/interop/golden tmp rc
	tmp=$(mktemp -d)
	mkdir -p "$dest"
	python3 scripts/interop_check.py --mixtune "$out/mixtune" --out "$tmp/$golden"
	rc=$?
	if [[ -e $tmp/$golden/manifest.json ]]; then
		tar czf "$dest/interop.tgz" -C "$tmp" "$golden"
		echo "interop: wrote $dest/interop.tgz ($(du -k "$dest/interop.tgz" | cut -f1) KiB): tar xzf it in the repository root and commit $golden"
	fi
	rm -rf "$tmp"
	return $rc
}

run() {
	for f in "$out"/*.xz; do xz -d -f "$f"; done
	chmod +x "$out/mixtune" "$out/vkprobe" "$out"/*.test
	if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
		for f in .devcarry/gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
	[[ -e $icd ]] && export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
	echo "== the GPU"
	nvidia-smi -L
	nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | tr -d ' ')
	"$out/vkprobe" -list | tee /tmp/vkprobe.txt
	if grep -qi "UUID $uuid" /tmp/vkprobe.txt; then
		echo "UUID: Vulkan reports nvidia-smi's $uuid"
	else
		echo "UUID: MISMATCH: nvidia-smi says $uuid; Vulkan reports $(grep -o 'UUID [^ ]*' /tmp/vkprobe.txt | tr '\n' ' ')"
	fi
	export MIXTUNE_VK_DEVICE=$uuid

	# vkprobe: each GEMM variant the device runs (scalar fp32, bf16-B,
	# fp16-B; fp16 and bf16 tensor cores, at ragged shapes too) against
	# float64, then TFLOP/s at 1024³..4096³ and TinyLlama's training shapes
	# (gpu/vulkan's TestGemmTensorCores is the same check as a Go test; its
	# test binary would take the carried tree past 64 MiB)
	part "kernels and GEMM TFLOP/s (vkprobe)" 60 "$out/vkprobe" -device "$uuid" -sizes 1024,2048,4096
	# the default tiles again, operands narrowed to 16-bit memory first
	# (--narrow-16bit-operands: the same bits, K steps that only copy)
	part "GEMM TFLOP/s, operands narrowed first (vkprobe -narrow16)" 45 "$out/vkprobe" -device "$uuid" -sizes 4096 -narrow16 \
		-variants coopmat-khr-bf16-128x256,coopmat-nv-fp16-128x256
	(cd gpu/vkengine && part "per-op parity suite (gpu/vkengine)" 90 "../../$out/vkengine.test" -test.count=1 -test.v) |
		grep -E "^(== |-- |--- FAIL|ok|FAIL|PASS)|of the largest|worst"
	(cd train && part "training against the CPU engine" 150 "../$out/train.test" -test.count=1 -test.v \
		-test.run '^(TestVulkanQuickstartMatchesCPU|TestResumeAcrossEngines|TestBenchOnVulkan|TestVulkanTaskAccuracy)$') |
		grep -E "^(== |-- |--- |ok|FAIL|PASS)|worst relative|B/step"
	part "interop with transformers and PEFT" 120 bash scripts/gpu_check.sh interop

	echo
	echo "== tokens/s: mixtune (Vulkan: fp32; bf16 rounding with its products on bf16 tensor cores where the device has them; bf16 on the scalar GEMM; GPU_CHECK_PRECISIONS adds bf16-cm2, the coopmat2 tile, and bf16-narrow16) and PyTorch (cuda, bf16 base) on the same GPU"
	declare -A shape=(
		[bench]="--vocab 512 --dim 256 --layers 4 --heads 8 --seq 128 --batch 8"
		[mid]="--vocab 8192 --dim 512 --layers 8 --heads 8 --seq 256 --batch 4"
		[smollm2]="--vocab 49152 --dim 576 --layers 30 --heads 9 --seq 512 --batch 1"
		[tinyllama]="--vocab 32000 --dim 2048 --layers 22 --heads 32 --seq 2048 --batch 1"
	)
	declare -A ffn=([bench]=688 [mid]=1376 [smollm2]=1536 [tinyllama]=5632)
	for s in ${GPU_CHECK_SHAPES:-bench mid smollm2 tinyllama}; do
		for p in ${GPU_CHECK_PRECISIONS:-fp32 bf16 bf16-scalar bf16-cm2}; do
			extra=()
			[[ $p == bf16* ]] && extra=(--precision bf16 --base-dtype bf16)
			[[ $p == *-scalar ]] && extra+=(--scalar-gemm)
			[[ $p == *-cm2 ]] && extra+=(--gemm-tile cm2-128x256)
			[[ $p == *-narrow16 ]] && extra+=(--narrow-16bit-operands)
			r=$(timeout 60 "$out/mixtune" bench ${shape[$s]} --ffn "${ffn[$s]}" --steps 3 --warmup 1 \
				--vulkan-device "$uuid" "${extra[@]}" --json 2>&1 | tail -1)
			echo "mixtune $s $p: ${r:-no result (cut at 60 s, or failed)}"
		done
		if [[ -e $out/torch_peer.py ]]; then
			for sdpa in "" --sdpa; do
				r=$(timeout 60 python3 "$out/torch_peer.py" ${shape[$s]} --hidden "${ffn[$s]}" --steps 3 --adapters lora --modes bf16 \
					--device cuda --base-dtype bf16 $sdpa 2>&1 | tail -1)
				echo "PyTorch $s bf16 ${sdpa:-eager}: ${r:-no result (cut at 60 s, or failed)}"
			done
		fi
	done
}

case "${1:-}" in
build) build ;;
run) run ;;
interop) interop ;;
*)
	echo "usage: $0 build|run|interop" >&2
	exit 2
	;;
esac
