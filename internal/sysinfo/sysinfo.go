// Package sysinfo reads facts about the running process and machine that
// runs record and benchmarks report.
package sysinfo

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// PeakRSS is the process's peak resident set size in bytes: VmHWM from
// /proc/self/status on Linux. Elsewhere it falls back to the memory the Go
// runtime obtained from the OS, and ok is false.
func PeakRSS() (bytes uint64, ok bool) {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, found := strings.CutPrefix(sc.Text(), "VmHWM:"); found {
				fields := strings.Fields(rest)
				if len(fields) == 2 && fields[1] == "kB" {
					if kb, err := strconv.ParseUint(fields[0], 10, 64); err == nil {
						return kb * 1024, true
					}
				}
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Sys, false
}
