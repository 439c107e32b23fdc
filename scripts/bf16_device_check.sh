#!/usr/bin/env bash
# bf16_device_check.sh build [DIR]   (here, with Go)
# bf16_device_check.sh run [DIR]     (on the machine with the CPU to check)
#
# The bf16 units' checks for a machine this one cannot be: a CPU with
# avx512_bf16 (and AMX). `build` writes the test binaries of blas and nn,
# xz-compressed, to DIR (default .devcarry/bf16, ignored by git) and the
# mixtune binary beside gpu_check.sh's (.devcarry/gpucheck/mixtune.xz,
# rebuilt from this tree: one copy serves both scripts) or, without that
# folder, to DIR. `run`, from the repository root there, prints within
# about a minute:
#   - the CPU model and its AVX-512, bf16 and AMX flags;
#   - the bf16 tests of blas and nn: each instruction (VDPBF16PS,
#     TDPBF16PS) against the model of its SDM semantics, the VDPBF16PS and
#     AMX kernels against their models (bit for bit) and the float64
#     bound, the AMX encodings against GNU as where binutils is there, a
#     linear layer on each bf16 GEMM against the emulation, attention's
#     products on each bf16 GEMM (every product against float64 within
#     γ_(k+2), the outputs and gradients against the emulation within
#     attnBound, 1 and 3 workers bit for bit). On a CPU with
#     avx512_bf16 none may SKIP except those naming oneDNN where libdnnl is
#     missing, and those naming AMX-BF16 where the CPU lacks amx_bf16;
#   - GEMM GFLOP/s at the D576 training shapes on 2 threads, native fp32
#     beside native-bf16 (the VDPBF16PS kernel, bits in, op(B) packed per
#     call) and e2e-native-bf16-packedW (float32 operands rounded as
#     packed, the weight packed once: what nn runs), the same two for the
#     AMX kernel (native-amx-bf16, e2e-native-amx-bf16-packedW), with the
#     bf16/fp32 ratios; oneDNN's where libdnnl loads;
#   - attention's forward and backward at SmolLM2's shape (512 tokens, 9
#     heads of 64), bf16 policy, 2 workers: emulated against the bf16
#     GEMMs (BenchmarkAttentionBF16, ms per pass and GFLOP/s), and the LM
#     head loss at the mid and SmolLM2 heads (BenchmarkLMHeadLossBF16);
#   - mixtune bench on the bench and mid shapes at 2 threads: fp32, bf16
#     emulate, bf16 hardware and bf16 auto (tokens/s, peak RSS, the path);
#   - with DNNL_DIR set to a folder holding libdnnl.so.2 (and its
#     libgomp.so.1, libOpenCL.so.1), with LD_LIBRARY_PATH including it:
#     oneDNN's tests, the GEMMs with oneDNN's fp32 and bf16 columns, and
#     the benches on --blas onednn (bf16 hardware: oneDNN's bf16 GEMM).
# Each part runs under its own time limit and says so when it is cut.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: bf16_device_check.sh build|run [DIR]}
dir=${2:-.devcarry/bf16}
shared=.devcarry/gpucheck

# part NAME SECONDS COMMAND...: runs a part under its time limit; the
# functions below run as bash -c FUNCTION [ARGS] (exported in run).
source scripts/part.sh

# tests [BLAS NN]: the tests of blas and nn whose names match (default:
# every bf16 test), one line each; run in blas/ and nn/, as
# TestVDPBF16PSEncoding reads the .s file beside it.
tests() {
	local abs
	abs=$(cd "$dir" && pwd)
	(cd blas && "$abs/bf16.test" -test.run "${1:-BF16|VDPBF16|AMX}" -test.v 2>&1) | grep -v '^=== ' |
		grep -E '^(--- |ok|PASS|FAIL|panic)|bound|CPU lacks|AMX|TDPBF16PS|misses|within|no bf16 GEMM|not installed|SIGILL|illegal' || true
	(cd nn && "$abs/nn.test" -test.run "${2:-LinearBF16Path|LinearOnBF16Units|LinearPackedWeightCache|RoundsInPack|AttentionBF16Path|AttentionOnBF16Units|LMHeadLossBF16Path|LMHeadLossOnBF16Units}" -test.v 2>&1) |
		grep -E '^(--- |ok|PASS|FAIL|panic)|    --- FAIL|within|products, worst|no bf16 GEMM|SIGILL|illegal' || true
}

# attention: BenchmarkAttentionBF16, ms per forward and backward pass,
# and BenchmarkLMHeadLossBF16, the LM head loss at the mid and SmolLM2
# heads.
attention() {
	"$dir/nn.test" -test.run '^$' -test.benchtime 3x -test.bench 'AttentionBF16|LMHeadLossBF16' -test.v 2>&1 |
		awk '/ns\/op/ { printf "%-52s %8.1f ms %8s GFLOP/s\n", $1, $3 / 1e6, $5; next } /_test\.go:|SKIP/'
}

# gemms: GFLOP/s at the D576 shapes, 2 threads, and bf16/fp32 ratios.
gemms() {
	"$dir/bf16.test" -test.run '^$' -test.benchtime 3x \
		-test.bench 'GEMMTraining/D576/./././threads=2' 2>&1 |
		awk '/GFLOP/ {
			n = split($1, p, "/"); shape = p[3] "/" p[4]; impl = p[5]
			if (impl !~ /^(native|native-bf16|e2e-native-bf16-packedW|native-amx-bf16|e2e-native-amx-bf16-packedW|onednn|onednn-bf16)$/) next
			g[shape, impl] = $(NF-1); if (!(shape in seen)) { seen[shape] = 1; order[++k] = shape }
		}
		function ratio(s, impl) {
			return (g[s, "native"] > 0 && g[s, impl] > 0) ? sprintf("%.2fx", g[s, impl] / g[s, "native"]) : "-"
		}
		END {
			printf "%-22s %8s %12s %7s %12s %7s %10s %7s %12s %7s %8s %12s\n", "shape (GFLOP/s)", "native", "native-bf16", "/fp32", "e2e-bf16-pW", "/fp32", "amx-bf16", "/fp32", "e2e-amx-pW", "/fp32", "onednn", "onednn-bf16"
			for (i = 1; i <= k; i++) {
				s = order[i]
				printf "%-22s %8s %12s %7s %12s %7s %10s %7s %12s %7s %8s %12s\n", s, g[s, "native"],
					g[s, "native-bf16"], ratio(s, "native-bf16"), g[s, "e2e-native-bf16-packedW"], ratio(s, "e2e-native-bf16-packedW"),
					g[s, "native-amx-bf16"], ratio(s, "native-amx-bf16"), g[s, "e2e-native-amx-bf16-packedW"], ratio(s, "e2e-native-amx-bf16-packedW"),
					g[s, "onednn"], g[s, "onednn-bf16"]
			}
		}'
}

# benches BLAS [SHAPE...]: mixtune bench on the shapes (default bench
# and mid), 2 threads.
benches() {
	local blas=$1
	shift
	local shapes=("$@")
	[ ${#shapes[@]} -eq 0 ] && shapes=(bench mid)
	for s in "${shapes[@]}"; do
		local shape=(--vocab 512 --dim 256 --layers 4 --heads 8 --ffn 688 --seq 128 --batch 8 --steps 5 --warmup 1)
		[ "$s" = mid ] && shape=(--vocab 8192 --dim 512 --layers 8 --heads 8 --ffn 1376 --seq 256 --batch 4 --steps 3 --warmup 1)
		for run in "fp32" "bf16 emulate" "bf16 hardware" "bf16 auto"; do
			set -- $run
			local extra=(--precision "$1")
			[ -n "${2:-}" ] && extra+=(--bf16-matmul "$2")
			[ "$s" = mid ] && [ "${2:-}" = auto ] && continue
			local j
			j=$("$mt" bench "${shape[@]}" --blas "$blas" --threads 2 "${extra[@]}" --json 2>&1 | tail -1)
			echo "$j" | awk -v s="$s" -v r="$run" -v b="$blas" '
				/tokens_per_s/ {
					match($0, /"tokens_per_s":[0-9.]+/); t = substr($0, RSTART + 15, RLENGTH - 15)
					match($0, /"peak_rss_bytes":[0-9]+/); m = substr($0, RSTART + 17, RLENGTH - 17)
					k = ""; if (match($0, /"bf16_kernel":"[^"]*"/)) k = substr($0, RSTART + 15, RLENGTH - 16)
					printf "%-6s %-14s --blas %-7s %8.0f tok/s  peak RSS %5.0f MiB  %s\n", s, r, b, t, m / 1048576, k; next }
				{ print s, r, b, "failed:", $0 }'
		done
	done
}

case $mode in
build)
	set -e
	mkdir -p "$dir"
	exclude=$(git rev-parse --git-path info/exclude)
	grep -qx '/.devcarry/' "$exclude" 2>/dev/null || echo '/.devcarry/' >>"$exclude"
	export CGO_ENABLED=0
	go test -c -ldflags='-s -w' -o "$dir/bf16.test" ./blas
	go test -c -ldflags='-s -w' -o "$dir/nn.test" ./nn
	mtdir=$dir
	[ -d "$shared" ] && mtdir=$shared
	go build -ldflags='-s -w' -o "$mtdir/mixtune" ./cmd/mixtune
	rm -f "$dir/bf16.tgz"
	xz -f -9 "$dir/bf16.test" "$dir/nn.test" "$mtdir/mixtune"
	du -sh "$dir" "$mtdir/mixtune.xz"
	echo "there: scripts/bf16_device_check.sh run $dir (DNNL_DIR=... for oneDNN)"
	;;
run)
	for f in "$dir"/*.xz; do [ -e "$f" ] && xz -d -k -f "$f"; done
	mt=
	for d in "$dir" "$shared"; do
		[ -f "$d/mixtune.xz" ] && xz -d -k -f "$d/mixtune.xz"
		if [ -f "$d/mixtune" ]; then
			mt=$d/mixtune
			break
		fi
	done
	chmod +x "$dir"/*.test ${mt:+"$mt"}
	export -f tests gemms attention benches
	export dir mt
	echo "== the CPU"
	lscpu | grep -E 'Model name|^CPU\(s\)' || true
	echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_fp16|avx512_vnni|amx_bf16|amx_tile|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
	part "bf16 tests" 120 bash -c tests
	part "GEMM GFLOP/s, 2 threads" 45 bash -c gemms
	part "attention and the LM head, bf16 policy, 2 workers" 45 bash -c attention
	if [ -n "$mt" ]; then
		part "mixtune bench, 2 threads" 60 bash -c "benches native"
	else
		echo "no mixtune binary in $dir or $shared: run build"
	fi
	if [ -n "${DNNL_DIR:-}" ]; then
		if [ -f "$DNNL_DIR/libdnnl.so.2" ]; then
			export LD_LIBRARY_PATH=$DNNL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
			echo
			echo "== with oneDNN from $DNNL_DIR"
			part "oneDNN's tests" 45 bash -c "tests 'OneDNN|ChooseBF16|BF16Candidates' 'LinearOnBF16Units|AttentionOnBF16Units|LMHeadLossOnBF16Units'"
			part "GEMM GFLOP/s with oneDNN, 2 threads" 30 bash -c gemms
			part "attention and the LM head with oneDNN, 2 workers" 45 bash -c attention
			[ -n "$mt" ] && part "mixtune bench with oneDNN, 2 threads" 30 bash -c "benches onednn bench"
		else
			echo "DNNL_DIR=$DNNL_DIR holds no libdnnl.so.2"
		fi
	fi
	;;
*)
	echo "usage: bf16_device_check.sh build|run [DIR]" >&2
	exit 2
	;;
esac
