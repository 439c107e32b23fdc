package cpufeat

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Linux's arch_prctl codes (asm/prctl.h) and the tile-data state component.
const (
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// requestAMX asks Linux (5.16 and later) for the AMX tile-data state:
// without it the first AMX instruction faults.
func requestAMX() error {
	if _, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); errno != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %w", errno)
	}
	return nil
}
