//go:build !(linux && amd64)

package cpufeat

import (
	"errors"
	"runtime"
)

// requestAMX reports AMX unusable: mixtune asks for the tile state only on
// Linux (other systems grant it differently, or not at all).
func requestAMX() error {
	return errors.New("AMX permission is requested on linux/amd64 only, not " + runtime.GOOS + "/" + runtime.GOARCH)
}
