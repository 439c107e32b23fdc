//go:build !purego

package blas

import "golang.org/x/sys/cpu"

func cpuHasAVX2FMA() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }
func cpuHasAVX512F() bool { return cpu.X86.HasAVX512F }
