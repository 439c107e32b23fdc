#!/usr/bin/env bash
# bf16_device_check.sh build [DIR]   (here)
# bf16_device_check.sh run [DIR]     (on the machine with the CPU to check)
#
# The bf16 units' checks for a machine this one cannot be: a CPU with
# avx512_bf16 (and AMX). `build` writes static test binaries of blas and
# nn and a mixtune binary, packed as DIR/bf16.tgz (default .devcarry/bf16,
# ignored by git; a tarball to stay small enough to carry). `run`, from
# the repository root there, unpacks it and prints:
#   - the CPU model and its bf16 flags;
#   - the bf16 tests of blas and nn: the instruction against the model of
#     its SDM semantics, the VDPBF16PS kernel against that model (bit for
#     bit) and the float64 bound, a linear layer on each bf16 GEMM against
#     the emulation. On a CPU with avx512_bf16 none may SKIP except those
#     naming oneDNN where libdnnl is missing;
#   - GEMM GFLOP/s at the SmolLM2 shapes, 2 threads: native fp32 against
#     native-bf16 (and oneDNN's where libdnnl loads);
#   - mixtune bench --precision bf16 at 2 threads with each bf16 path.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: bf16_device_check.sh build|run [DIR]}
dir=${2:-.devcarry/bf16}
case $mode in
build)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$tmp/bf16.test" ./blas
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$tmp/nn.test" ./nn
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$tmp/mixtune" ./cmd/mixtune
	mkdir -p "$dir"
	tar czf "$dir/bf16.tgz" -C "$tmp" bf16.test nn.test mixtune
	echo "wrote $dir/bf16.tgz; there: scripts/bf16_device_check.sh run $dir"
	;;
run)
	cd "$dir"
	tar xzf bf16.tgz
	lscpu | grep 'Model name' || true
	{ grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo || echo 'no avx512f, avx512_bf16 or AMX flags'; } | sort | uniq -c
	./bf16.test -test.run 'BF16|VDPBF16' -test.v 2>&1 | grep -E '^(--- |ok|PASS|FAIL)|bound|CPU lacks|within|no bf16 GEMM' || true
	./nn.test -test.run 'LinearBF16Path|LinearOnBF16Units' -test.v 2>&1 | grep -E '^(--- |ok|PASS|FAIL)|within|no bf16 GEMM' || true
	./bf16.test -test.run '^$' -test.bench 'GEMMTraining/D576/' -test.benchtime 3x 2>&1 |
		{ grep GFLOP || true; } | grep 'threads=2' | grep -E '/(native|native-bf16|onednn|onednn-bf16)/' | awk '{print $1, $(NF-1), $NF}' || true
	for path in emulate hardware; do
		./mixtune bench --precision bf16 --bf16-matmul "$path" --blas native --threads 2 --steps 5 --warmup 1 2>&1 | tail -2 || true
	done
	;;
*)
	echo "usage: bf16_device_check.sh build|run [DIR]" >&2
	exit 2
	;;
esac
