//go:build !amd64 || purego

package blas

// nativeAsmImpl: no assembly outside amd64 (or with the purego build tag);
// the portable code runs.
func nativeAsmImpl() *nativeImpl { return nil }
