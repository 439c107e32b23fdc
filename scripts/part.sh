# part NAME SECONDS COMMAND...: runs a part of a device check under its
# time limit and says how it ended (sourced by gpu_check.sh and
# bf16_device_check.sh).
part() {
	local name=$1 secs=$2
	shift 2
	echo
	echo "== $name (limit ${secs}s)"
	local t0=$SECONDS
	timeout "$secs" "$@"
	local rc=$?
	if [[ $rc == 124 ]]; then
		echo "-- $name: cut at ${secs}s"
	else
		echo "-- $name: exit $rc in $((SECONDS - t0))s"
	fi
}
