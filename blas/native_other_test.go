//go:build !amd64 || purego

package blas

func cpuHasAVX2FMA() bool { return false }
func cpuHasAVX512F() bool { return false }
