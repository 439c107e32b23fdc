//go:build race

package nn

// raceEnabled: the race detector is on, and allocation counts include its
// own bookkeeping.
const raceEnabled = true
