#!/usr/bin/env bash
# Compiles the shaders listed in gpu/vulkan/shaders/build_glslang.txt
# (output, source, extra flags): those that need GL_KHR_cooperative_matrix
# and GL_EXT_bfloat16, which Debian's glslc lacks, with a glslang built
# from source. GLSLANG names the binary (default: glslang on PATH). To
# build one, as build_glslang.txt records:
#   git clone https://github.com/KhronosGroup/glslang && cd glslang
#   git checkout <the commit build_glslang.txt names>
#   mkdir build && cd build
#   cmake .. -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF -DGLSLANG_TESTS=OFF -DENABLE_HLSL=OFF
#   cmake --build . -j2 --target glslang-standalone   # StandAlone/glslang
# TestSPIRVGlslangUpToDate recompiles them when that glslang is at hand
# (MIXTUNE_GLSLANG or glslang on PATH, of the version the file names).
set -euo pipefail
cd "$(dirname "$0")/../gpu/vulkan/shaders"
glslang=${GLSLANG:-glslang}
command -v "$glslang" >/dev/null || { echo "gen_spirv_coopmat: $glslang not found (set GLSLANG; see this script's header)" >&2; exit 1; }
want=$(sed -n 's/^# glslang: //p' build_glslang.txt)
have=$("$glslang" --version | sed -n 1p)
if [[ $want != "$have" ]]; then
	echo "gen_spirv_coopmat: build_glslang.txt names '$want'; this is '$have' (updating the line: record its commit too)" >&2
	sed -i "s/^# glslang: .*/# glslang: $have/" build_glslang.txt
fi
grep -v '^#' build_glslang.txt | while read -r out src flags; do
	[[ -z $out ]] && continue
	# shellcheck disable=SC2086 # flags are words
	"$glslang" -V --target-env vulkan1.2 -S comp $flags -o "$out" "$src" >/dev/null
	echo "$out: $(stat -c %s "$out") bytes from $src $flags"
done
