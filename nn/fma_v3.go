//go:build amd64.v3

package nn

// goFusesFMA: with GOAMD64=v3 or later the compiler fuses x*y+z into FMAs.
const goFusesFMA = true
