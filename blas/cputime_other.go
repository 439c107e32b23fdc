//go:build !unix

package blas

// processCPUSeconds cannot be read here: auto then trusts its
// measurements as they are.
func processCPUSeconds() float64 { return -1 }
