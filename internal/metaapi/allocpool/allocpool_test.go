package allocpool

import (
	"testing"
	"time"
)

// A refill asks for the blocks taken since the previous one, scaled to a
// second, within 1..most; the first asks for one.
func TestRefillSize(t *testing.T) {
	for _, c := range []struct {
		taken   int
		elapsed time.Duration
		first   bool
		want    int
	}{
		{0, 0, true, 1},
		{5, time.Millisecond, true, 1},
		{1, 0, false, 64},
		{1, 10 * time.Millisecond, false, 64},
		{1, 100 * time.Millisecond, false, 10},
		{3, 2 * time.Second, false, 2}, // 1.5 a second, rounded up
		{4, 10 * time.Second, false, 1},
		{1, time.Hour, false, 1},
		{0, time.Second, false, 1},
		{1000, time.Second, false, 64},
	} {
		if got := refillSize(c.taken, c.elapsed, c.first, 64); got != c.want {
			t.Errorf("refillSize(%d, %v, %v, 64) = %d, want %d", c.taken, c.elapsed, c.first, got, c.want)
		}
	}
}
