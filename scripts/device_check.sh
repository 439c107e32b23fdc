#!/usr/bin/env bash
# device_check.sh pack   here, with Go: builds what scripts/gpu_check.sh and
#                        scripts/bf16_device_check.sh build, plus gpu/vulkan's
#                        test binary and this machine's oneDNN (libdnnl.so.2
#                        and the libraries it loads), into one solid xz
#                        archive, .devcarry/bin.tar.xz (the device tool
#                        carries at most 64 MiB with the repository: carry
#                        .devcarry)
# device_check.sh run    there, on an NVIDIA GPU host without Go (OUT names
#                        the folder for the logs): in at most 420 s, at once,
#                        - cores 0-3: one small step to fill the driver's
#                          shader cache, vkprobe (the default tiles and the
#                          coopmat2 tiles and the scalar kernel checked
#                          against float64 and timed, split-K against one
#                          pass; the default tiles again with operands
#                          narrowed first, -narrow16), TinyLlama-1.1B-shaped
#                          LoRA tokens/s on the Vulkan engine (bf16 on the
#                          tensor cores, with --narrow-16bit-operands, on
#                          the coopmat2 tile cm2-128x256, with
#                          --no-record-ahead) and the default and coopmat2
#                          runs' per-kernel profiles,
#                          PyTorch's bf16 eager on the same card, the per-op
#                          parity suite, quickstart training against the CPU
#                          engine, the tensor-core GEMM and attention
#                          tests;
#                        - cores 4-5: scripts/bench_vs_torch.sh 3 1 on the
#                          host CPU (mixtune native and oneDNN against
#                          PyTorch's CPU autocast, fp32 and bf16, tokens/s
#                          and peak RSS; cores 6-13 stay idle, so it is as
#                          quiet as the GPU work beside it lets it be);
#                        - cores 14-15: scripts/bf16_device_check.sh with
#                          oneDNN (the bf16 units: AMX and VDPBF16PS tests,
#                          GEMMs, the linear and attention benchmarks).
# device_check.sh diagnose   there, after run, in at most 280 s: how long
#                        an engine takes to start with the driver's shader
#                        cache cold and warm, TinyLlama-1.1B-shaped tokens/s
#                        (fp32; bf16, with --narrow-16bit-operands, on cm2-128x256)
#                        against PyTorch's bf16 eager and SDPA, the per-op
#                        parity suite given 150 s, vkprobe's GEMM timings
#                        without its checks; on cores 4-5, `mixtune bench`
#                        in bf16 with the base in fp32 and in bf16, with a
#                        Go CPU profile of each (OUT gets cpu-*.prof).
# device_check.sh pack-quick BASE   here: the binaries quick needs, and
#                        mixtune built at git revision BASE (the baseline
#                        the same sitting compares with), into
#                        .devcarry/quick.tar.xz (carry it and .devcarry/gl)
# device_check.sh quick  there (for a session with little device time
#                        left; give it the call's 600 s: the measurements
#                        come first, so a cut-off loses only tests): the
#                        driver's statistics of the attention and GEMM
#                        kernels (vkprobe -stats), a small step of each
#                        build (the driver's shader cache filled),
#                        compute.gemm_tile and split_dkv: auto at
#                        TinyLlama's bf16 shapes (every tile the device
#                        runs checked against float64 and timed, and
#                        attention's backward joint and split; each one's
#                        ms a step printed from the cache it writes),
#                        TinyLlama's bf16 step with this
#                        build (its default twice, on each unrolled tile,
#                        with --split-dkv, with --checkpoint; each with its
#                        device peak) and with BASE's, PyTorch's bf16
#                        eager, the default's per-kernel profile,
#                        attention's dispatches timed (BenchmarkAttention);
#                        then the tensor-core GEMM and attention tests,
#                        training against the CPU and the per-op parity
#                        suite. Its plumbing can be tried here on
#                        lavapipe: a stand-in nvidia-smi on PATH printing
#                        lavapipe's UUID, VK_DRIVER_FILES naming lvp_icd,
#                        OUT set (TinyLlama's shape then fails on
#                        lavapipe's 128 MiB buffers, and says so).
# How the 2026-11-26 H100 figures in docs/gpus.md and docs/mixed-precision.md
# were made (then with the 8B rows of docs/qlora.md on cores 4-13).
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
	mkdir -p dnnl
	local lib
	for lib in libdnnl.so.2 libgomp.so.1 libOpenCL.so.1; do
		cp -L "$(ldconfig -p | grep "[[:space:]]$lib (" | head -1 | sed 's/.*=> //')" dnnl/
	done
	local bins=(gpucheck/mixtune gpucheck/vkprobe gpucheck/train.test gpucheck/vkengine.test gpucheck/vulkan.test bf16/bf16.test bf16/nn.test dnnl/libdnnl.so.2 dnnl/libgomp.so.1 dnnl/libOpenCL.so.1)
	tar cf - "${bins[@]}" | xz -9e --lzma2=dict=64MiB -T2 >bin.tar.xz
	rm -f "${bins[@]}"
	du -sh bin.tar.xz .
}

gpu() {
	local tiny="--vocab 32000 --dim 2048 --layers 22 --heads 32 --seq 2048 --batch 1" small="--vocab 512 --dim 256 --layers 2 --heads 4 --ffn 688 --seq 128 --batch 2" run name
	# On a fresh machine the driver compiles the engine's pipelines
	# first (35 s on the H100, 2 s once cached): one small bf16 step
	# fills its cache before anything is timed.
	echo "== driver cache warm-up $(date +%T)"
	timeout 90 "$M" bench $small --steps 1 --warmup 0 --vulkan-device "$uuid" --precision bf16 --json >/dev/null 2>&1
	echo "== vkprobe, the default tiles and the scalar kernel $(date +%T)"
	timeout 75 "$G/vkprobe" -device "$uuid" -sizes 4096 -variants coopmat-khr-bf16-128x256,coopmat-nv-fp16-128x256,coopmat2-nv-bf16-128x256,coopmat2-nv-fp16-128x256,coopmat2-nv-bf16-128x128,scalar-tiled-64x64 2>&1 | grep -v "cooperative-matrix shape" | grep -v " ok: worst"
	# the same tiles with their operands narrowed to 16-bit memory first
	# (--narrow-16bit-operands): the same bits, the K steps only copying
	echo "== vkprobe -narrow16, the default tiles $(date +%T)"
	timeout 45 "$G/vkprobe" -device "$uuid" -sizes 4096 -narrow16 -variants coopmat-khr-bf16-128x256,coopmat-nv-fp16-128x256 2>&1 | grep -v "cooperative-matrix shape" | grep -v " ok: worst" | grep -v "scalar-tiled"
	# the tensor cores' correctness first, then the timings
	echo "== TestGemmTensorCores $(date +%T)"
	(cd gpu/vulkan && timeout 30 "$G/vulkan.test" -test.run '^TestGemmTensorCores$' -test.v 2>&1 | grep -E "^--- |worst|variant|FAIL|PASS" | grep -v "    --- PASS")
	echo "== TestAttentionTensorCores $(date +%T)"
	(cd gpu/vulkan && MIXTUNE_VK_DEVICE=$uuid timeout 40 "$G/vulkan.test" -test.run '^TestAttentionTensorCores$' -test.v 2>&1 | grep -E "^--- |worst|products|FAIL|PASS|differs")
	for run in "bf16 --precision bf16 --base-dtype bf16" "bf16-narrow16 --precision bf16 --base-dtype bf16 --narrow-16bit-operands" \
		"bf16-cm2 --precision bf16 --base-dtype bf16 --gemm-tile cm2-128x256" "bf16-no-record-ahead --precision bf16 --base-dtype bf16 --no-record-ahead"; do
		set -- $run
		name=$1
		shift
		echo "mixtune tinyllama $name: $(timeout 35 "$M" bench $tiny --ffn 5632 --steps 3 --warmup 1 --vulkan-device "$uuid" "$@" --json 2>&1 | tail -1)"
	done
	for run in "bf16 --precision bf16 --base-dtype bf16" "bf16-cm2 --precision bf16 --base-dtype bf16 --gemm-tile cm2-128x256"; do
		set -- $run
		name=$1
		shift
		echo "== mixtune tinyllama $name, profiled $(date +%T)"
		timeout 35 "$M" bench $tiny --ffn 5632 --steps 2 --warmup 1 --vulkan-device "$uuid" "$@" --profile 2>&1 | tail -34
	done
	echo "== PyTorch tinyllama bf16 eager $(date +%T)"
	timeout 40 python3 "$G/torch_peer.py" $tiny --hidden 5632 --steps 3 --adapters lora --modes bf16 --device cuda --base-dtype bf16 2>&1 | tail -1
	echo "== per-op parity suite $(date +%T)"
	(cd gpu/vkengine && timeout 100 "$G/vkengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- FAIL|ok|FAIL|PASS)")
	echo "== training against the CPU $(date +%T)"
	(cd train && timeout 40 "$G/train.test" -test.run '^TestVulkanQuickstartMatchesCPU$' -test.v 2>&1 | grep -E "^--- |worst relative")
	echo "gpu done $(date +%T)"
}

# gpu_diagnose: diagnose's GPU half (see the top of this file).
gpu_diagnose() {
	local tiny="--vocab 32000 --dim 2048 --layers 22 --heads 32 --seq 2048 --batch 1" small="--vocab 512 --dim 256 --layers 2 --heads 4 --ffn 688 --seq 128 --batch 2" run name t0 rc
	for run in cold warm; do
		t0=$(date +%s%N)
		timeout 90 "$M" bench $small --steps 1 --warmup 0 --vulkan-device "$uuid" --precision bf16 --json >/dev/null 2>&1
		rc=$?
		echo "engine start and one small bf16 step, driver cache $run: $((($(date +%s%N) - t0) / 1000000)) ms (exit $rc)"
	done
	for run in "fp32" "bf16 --precision bf16 --base-dtype bf16" "bf16-narrow16 --precision bf16 --base-dtype bf16 --narrow-16bit-operands" \
		"bf16-cm2 --precision bf16 --base-dtype bf16 --gemm-tile cm2-128x256"; do
		set -- $run
		name=$1
		shift
		echo "mixtune tinyllama $name: $(timeout 50 "$M" bench $tiny --ffn 5632 --steps 3 --warmup 1 --vulkan-device "$uuid" "$@" --json 2>&1 | tail -1 | grep -o '"engine":"[^"]*"\|"tokens_per_s":[0-9.]*\|"ms_per_step":[0-9.]*\|"peak_rss_bytes":[0-9]*' | tr '\n' ' ')"
	done
	echo "== PyTorch tinyllama bf16 eager, then SDPA $(date +%T)"
	timeout 40 python3 "$G/torch_peer.py" $tiny --hidden 5632 --steps 3 --adapters lora --modes bf16 --device cuda --base-dtype bf16 2>&1 | tail -1
	timeout 40 python3 "$G/torch_peer.py" $tiny --hidden 5632 --steps 3 --adapters lora --modes bf16 --device cuda --base-dtype bf16 --sdpa 2>&1 | tail -1
	echo "== per-op parity suite $(date +%T)"
	(cd gpu/vkengine && timeout 150 "$G/vkengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- FAIL|ok|FAIL|PASS)|^--- PASS" | tail -60)
	echo "== vkprobe without checks $(date +%T)"
	timeout 40 "$G/vkprobe" -device "$uuid" -sizes 4096 -check=false 2>&1 | grep -v "cooperative-matrix shape" | tail -40
	echo "gpu done $(date +%T)"
}

# cpu_diagnose: diagnose's CPU half: bf16 with the base in fp32 and in
# bf16, each with its Go CPU profile in OUT.
cpu_diagnose() {
	lscpu | grep -E 'Model name' || true
	local s b blas
	local -A shape=([bench]="--vocab 512 --dim 256 --layers 4 --heads 8 --ffn 688 --seq 128 --batch 8" [mid]="--vocab 8192 --dim 512 --layers 8 --heads 8 --ffn 1376 --seq 256 --batch 4")
	for s in bench mid; do
		for b in fp32 bf16; do
			echo "$s base $b native: $(timeout 60 "$M" bench ${shape[$s]} --blas native --precision bf16 --base-dtype $b --steps 6 --warmup 1 --cpuprofile "$OUT/cpu-$s-$b.prof" --json 2>&1 | tail -1)"
		done
	done
	echo "mid base bf16 onednn, hardware: $(LD_LIBRARY_PATH=$DNNL_DIR timeout 60 "$M" bench ${shape[mid]} --blas onednn --precision bf16 --bf16-matmul hardware --base-dtype bf16 --steps 6 --warmup 1 --cpuprofile "$OUT/cpu-mid-bf16-onednn.prof" --json 2>&1 | tail -1)"
	echo "cpu done $(date +%T)"
}

# cpu_vs_torch: issue 23's table on two of the host's cores, mixtune's
# native and oneDNN backends against PyTorch's CPU autocast.
cpu_vs_torch() {
	echo "== bench_vs_torch.sh 3 1 on cores $(taskset -pc $$ | sed 's/.*: //'): $(date +%T)"
	lscpu | grep -E 'Model name' || true
	echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
	LD_LIBRARY_PATH=$DNNL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} MIXTUNE=$M PYTHON=python3 PEER=$G/torch_peer.py \
		bash scripts/bench_vs_torch.sh 3 1 2>&1
	echo "cpu done $(date +%T)"
}

# unpack: the binaries, oneDNN and (where the host has none) the Vulkan
# loader; G, M, DNNL_DIR and uuid for the checks.
unpack() {
	tar xJf .devcarry/bin.tar.xz -C .devcarry
	chmod +x .devcarry/gpucheck/* .devcarry/bf16/*
	G=$PWD/.devcarry/gpucheck M=$PWD/.devcarry/gpucheck/mixtune
	# oneDNN for the CPU parts (PyTorch's wheels link theirs statically);
	# bf16_device_check.sh and cpu_vs_torch put it on LD_LIBRARY_PATH
	export DNNL_DIR=$PWD/.devcarry/dnnl
	if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
		for f in .devcarry/gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
	[[ -e $icd ]] && export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | tr -d ' ')
	export G M uuid
}

# start: what run and diagnose begin with (OUT names the logs' folder).
start() {
	: "${OUT:?OUT must name a folder for the logs}"
	unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
	export PYTHONUNBUFFERED=1
	unpack
	echo "start $(date +%T) $uuid $(nvidia-smi --query-gpu=name --format=csv,noheader)"
}

run() {
	start
	export -f gpu cpu_vs_torch
	taskset -c 0-3 timeout 420 bash -c gpu >"$OUT/gpu.log" 2>&1 &
	taskset -c 4,5 timeout 420 bash -c cpu_vs_torch >"$OUT/cpu.log" 2>&1 &
	(taskset -c 14,15 timeout 280 bash scripts/bf16_device_check.sh run .devcarry/bf16 >"$OUT/bf16.log" 2>&1) &
	wait
	echo "end $(date +%T): logs in $OUT (gpu.log, cpu.log, bf16.log)"
}

# diagnose: the follow-up run (see the top of this file).
diagnose() {
	start
	export -f gpu_diagnose cpu_diagnose
	taskset -c 0-3 timeout 280 bash -c gpu_diagnose >"$OUT/gpu.log" 2>&1 &
	taskset -c 4,5 timeout 280 bash -c cpu_diagnose >"$OUT/cpu.log" 2>&1 &
	wait
	echo "end $(date +%T): logs in $OUT"
}

pack_quick() {
	set -e
	local base=${1:?pack-quick needs the baseline git revision} q=.devcarry/quick tmp
	rm -rf "$q" .devcarry/quick.tar.xz
	mkdir -p "$q" .devcarry/gl
	grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >>.git/info/exclude
	export CGO_ENABLED=0
	go build -ldflags='-s -w' -o "$q/mixtune" ./cmd/mixtune
	go build -ldflags='-s -w' -o "$q/vkprobe" ./gpu/vulkan/cmd/vkprobe
	go test -c -ldflags='-s -w' -o "$q/vulkan.test" ./gpu/vulkan
	go test -c -ldflags='-s -w' -o "$q/vkengine.test" ./gpu/vkengine
	go test -c -ldflags='-s -w' -o "$q/train.test" ./train
	tmp=$(mktemp -d)
	git archive "$base" | tar x -C "$tmp"
	(cd "$tmp" && go build -ldflags='-s -w' -o "$OLDPWD/$q/mixtune.base" ./cmd/mixtune)
	rm -rf "$tmp"
	git rev-parse --short "$base" >"$q/base.txt"
	cp ../shared/bench/torch_peer.py "$q/"
	if ! ls .devcarry/gl/libvulkan1_*.deb >/dev/null 2>&1; then
		bash scripts/gpu_check.sh build >/dev/null
	fi
	tar cf - -C .devcarry quick | xz -9e --lzma2=dict=64MiB -T2 >.devcarry/quick.tar.xz
	rm -rf "$q"
	du -sh .devcarry/quick.tar.xz .devcarry/gl
}

quick() {
	: "${OUT:?OUT must name a folder for the logs}"
	unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
	export PYTHONUNBUFFERED=1
	tar xJf .devcarry/quick.tar.xz -C .devcarry
	local q=$PWD/.devcarry/quick
	chmod +x "$q"/mixtune* "$q"/vkprobe "$q"/*.test
	if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
		for f in .devcarry/gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	fi
	local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
	[[ -e $icd ]] && export VK_DRIVER_FILES=$icd
	local uuid tiny run name bin out got
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | tr -d ' ')
	tiny="--vocab 32000 --dim 2048 --layers 22 --heads 32 --seq 2048 --batch 1"
	echo "start $(date +%T) $uuid $(nvidia-smi --query-gpu=name --format=csv,noheader); baseline $(cat "$q/base.txt")"
	echo "== pipeline statistics $(date +%T)"
	timeout 40 "$q/vkprobe" -device "$uuid" -stats 'attention_coop_[df]*_d64_bf16.spv,gemm_cm2_*_bf16.spv,attention_[df]*_d64.spv' 2>&1 | grep -v "flexible shape"
	# The driver compiles each pipeline on first use (35 s for an engine's
	# once, cold): a small step of each build first, so the timed runs
	# below find them in the driver's cache (heads of 64, as TinyLlama's).
	for bin in mixtune mixtune.base; do
		out=$(timeout 150 "$q/$bin" bench --vocab 512 --dim 256 --layers 1 --heads 4 --ffn 512 --seq 128 --batch 1 --steps 1 --warmup 0 --vulkan-device "$uuid" --precision bf16 --base-dtype bf16 --json 2>&1 | tail -1)
		got=$(grep -o '"engine":"[^"]*"\|"tokens_per_s":[0-9.]*' <<<"$out" | tr '\n' ' ')
		echo "warm $bin $(date +%T): ${got:-failed: ${out:0:400}}"
	done
	# compute.gemm_tile: auto times every tile the device runs (each checked
	# against float64 on the device first) at TinyLlama's products, and
	# compute.split_dkv: auto attention's backward joint and split, and
	# caches the choices, which the default runs below then read.
	echo "== GEMM tile and dK/dV split auto at TinyLlama's bf16 shapes $(date +%T)"
	out=$(timeout 150 "$q/mixtune" bench $tiny --ffn 5632 --steps 1 --warmup 0 --vulkan-device "$uuid" --precision bf16 --base-dtype bf16 --json 2>&1 | tail -1)
	grep -o '"gemm_tile_reason":"[^"]*"\|"split_dkv_reason":"[^"]*"\|"warnings":\[[^]]*\]' <<<"$out" || echo "failed: ${out:0:600}"
	python3 scripts/tune_report.py
	for run in "new:mixtune" "new-u8:mixtune --gemm-tile cm2-128x256u8" "new-256u8:mixtune --gemm-tile cm2-256x128u8" "new-split:mixtune --split-dkv" "new-ckpt:mixtune --checkpoint" "base:mixtune.base" "new-again:mixtune"; do
		name=${run%%:*}
		set -- ${run#*:}
		bin=$1
		shift
		out=$(timeout 40 "$q/$bin" bench $tiny --ffn 5632 --steps 3 --warmup 1 --vulkan-device "$uuid" --precision bf16 --base-dtype bf16 "$@" --json 2>&1 | tail -1)
		got=$(grep -o '"engine":"[^"]*"\|"gemm_tile":"[^"]*"\|"tokens_per_s":[0-9.]*\|"ms_per_step":[0-9.]*\|"loss":[0-9.]*\|"device_peak_bytes":[0-9]*' <<<"$out" | tr '\n' ' ')
		echo "mixtune tinyllama bf16 $name: ${got:-failed: ${out:0:400}}"
	done
	echo "== PyTorch tinyllama bf16 eager $(date +%T)"
	timeout 40 python3 "$q/torch_peer.py" $tiny --hidden 5632 --steps 3 --adapters lora --modes bf16 --device cuda --base-dtype bf16 2>&1 | tail -1
	echo "== mixtune tinyllama bf16, profiled $(date +%T)"
	timeout 40 "$q/mixtune" bench $tiny --ffn 5632 --steps 2 --warmup 1 --vulkan-device "$uuid" --precision bf16 --base-dtype bf16 --profile 2>&1 | tail -34
	echo "== BenchmarkAttention $(date +%T)"
	(cd gpu/vulkan && MIXTUNE_VK_DEVICE=$uuid timeout 60 "$q/vulkan.test" -test.run '^$' -test.bench '^BenchmarkAttention$' -test.benchtime 5x 2>&1 | grep -E "^Benchmark|FAIL")
	echo "== TestGemmTensorCores, TestAttentionTensorCores, TestCacheAttention $(date +%T)"
	(cd gpu/vulkan && MIXTUNE_VK_DEVICE=$uuid timeout 60 "$q/vulkan.test" -test.run '^(TestGemmTensorCores|TestAttentionTensorCores|TestCacheAttention)$' -test.v 2>&1 | grep -E "^--- |worst|variant|products|FAIL|PASS|differs" | grep -v "    --- PASS")
	echo "== training against the CPU $(date +%T)"
	(cd train && timeout 70 "$q/train.test" -test.run '^TestVulkanQuickstartMatchesCPU$' -test.v 2>&1 | grep -E "^--- |worst relative")
	echo "== per-op parity suite $(date +%T)"
	(cd gpu/vkengine && timeout 100 "$q/vkengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- FAIL|ok|FAIL|PASS)")
	echo "end $(date +%T)"
}

case "${1:-}" in
pack) pack ;;
pack-quick) pack_quick "${2:-}" ;;
quick) quick 2>&1 | tee "${OUT:?}/quick.log" ;;
run) run ;;
diagnose) diagnose ;;
*)
	echo "usage: $0 pack|run|diagnose|pack-quick BASE|quick" >&2
	exit 2
	;;
esac
