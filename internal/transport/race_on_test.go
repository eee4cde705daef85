//go:build race

package transport

// raceEnabled: the race detector is on (its instrumentation allocates, and
// sync.Pool drops items at random under it).
const raceEnabled = true
