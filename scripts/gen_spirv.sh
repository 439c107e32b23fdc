#!/usr/bin/env bash
# Compiles gpu/vulkan/shaders/*.comp to the SPIR-V committed next to them,
# as listed in gpu/vulkan/shaders/build.txt (output, source, extra flags),
# with Debian's glslc (apt-get install glslc). TestSPIRVUpToDate
# recompiles them and compares; run this after editing a shader, and
# update build.txt's "# glslc:" line when glslc's version changes.
set -euo pipefail
cd "$(dirname "$0")/../gpu/vulkan/shaders"
command -v glslc >/dev/null || { echo "gen_spirv: glslc not found (apt-get install glslc)" >&2; exit 1; }
want=$(sed -n 's/^# glslc: //p' build.txt)
have=$(glslc --version | sed -n 1p) # sed reads it all: no SIGPIPE under pipefail
if [[ $want != "$have" ]]; then
	echo "gen_spirv: build.txt names glslc '$want'; this is '$have' (updating the line)" >&2
	sed -i "s/^# glslc: .*/# glslc: $have/" build.txt
fi
grep -v '^#' build.txt | while read -r out src flags; do
	[[ -z $out ]] && continue
	# shellcheck disable=SC2086 # flags are words
	glslc -fshader-stage=compute --target-env=vulkan1.1 -O $flags -o "$out" "$src"
	echo "$out: $(stat -c %s "$out") bytes from $src $flags"
done
