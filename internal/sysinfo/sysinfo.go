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

// TotalMemory is the memory this process may use, in bytes: the machine's
// (MemTotal in /proc/meminfo), or its container's limit (cgroup v2
// memory.max, or v1 memory.limit_in_bytes) when that is smaller. ok is
// false where neither can be read.
func TotalMemory() (bytes uint64, ok bool) {
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, found := strings.CutPrefix(sc.Text(), "MemTotal:"); found {
				fields := strings.Fields(rest)
				if len(fields) == 2 && fields[1] == "kB" {
					if kb, err := strconv.ParseUint(fields[0], 10, 64); err == nil {
						bytes, ok = kb*1024, true
					}
				}
			}
		}
		f.Close()
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// "max" (v2) or a huge number (v1) mean no limit.
		if limit, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && limit > 0 && (!ok || limit < bytes) {
			bytes, ok = limit, true
		}
	}
	return bytes, ok
}
