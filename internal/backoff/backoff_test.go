package backoff

import (
	"context"
	"testing"
	"time"
)

func TestJitterRange(t *testing.T) {
	for _, d := range []time.Duration{1, 2, time.Millisecond, time.Second} {
		lo, hi := d, time.Duration(0)
		for range 2000 {
			j := Jitter(d)
			if j < d/2 || j > d/2+d {
				t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, j, d/2, d/2+d)
			}
			lo, hi = min(lo, j), max(hi, j)
		}
		if d >= time.Millisecond && (lo > d*3/4 || hi < d*5/4) {
			t.Fatalf("Jitter(%v) spans only [%v, %v] in 2000 draws", d, lo, hi)
		}
	}
	if Jitter(0) != 0 || Jitter(-1) != -1 {
		t.Fatal("Jitter of a non-positive pause changed it")
	}
}

// Sleep ends with the pause (true), or at once when its context has
// ended (false), however long the pause.
func TestSleep(t *testing.T) {
	if !Sleep(context.Background(), 0) {
		t.Fatal("a pause of 0 under a live context: false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("an hour's pause under an ended context: true")
	}
}
