package lograte

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand: no sleeps, no timing.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestOneLinePerIntervalWithCount: 10,000 repeats of one line (its
// numbers changing) a second apart write one line per minute, each saying
// how many it held back; every repeat is counted exactly once.
func TestOneLinePerIntervalWithCount(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	l := New(time.Minute, clk.now)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	const events = 10_000
	for i := range events {
		l.Log(log, slog.LevelError, fmt.Sprintf("background error: write meta/%06d.sst: no space left on device", i))
		clk.advance(time.Second)
	}
	// A minute later, one more: it reports the repeats held back last.
	clk.advance(time.Minute)
	l.Log(log, slog.LevelError, "background error: write meta/999999.sst: no space left on device")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// 10,000 s: the first line, then one every 60 s; then the last one.
	if want := (events+59)/60 + 1; len(lines) != want {
		t.Fatalf("%d lines for %d events a second apart, want %d (one a minute)", len(lines), events, want)
	}
	if strings.Contains(lines[0], "suppressed") {
		t.Fatalf("first line says it suppressed repeats: %s", lines[0])
	}
	total := 0
	for i, ln := range lines[1:] {
		var n int
		if _, err := fmt.Sscanf(ln[strings.Index(ln, "suppressed=")+len("suppressed="):], "%d", &n); err != nil {
			t.Fatalf("line without its count: %s", ln)
		}
		if n != 59 && i != len(lines)-2 {
			t.Fatalf("line reports %d held back, want 59: %s", n, ln)
		}
		total += n
	}
	if total+len(lines) != events+1 {
		t.Fatalf("%d written + %d reported held back != %d events", len(lines), total, events)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestKeysAreIndependent: a different line is not held back by another's
// interval, and the same line comes back once the interval has passed.
func TestKeysAreIndependent(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	l := New(time.Minute, clk.now)
	steps := []struct {
		key        string
		advance    time.Duration
		ok         bool
		suppressed int
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", 0, true, 0},
		{"a", 58 * time.Second, false, 0},
		{"a", time.Second, true, 2}, // 60 s after the first
		{"b", 0, false, 0},
		{"b", time.Hour, true, 1},
	}
	for i, s := range steps {
		clk.advance(s.advance)
		ok, n := l.Allow(s.key)
		if ok != s.ok || n != s.suppressed {
			t.Fatalf("step %d (%s): Allow = %v, %d; want %v, %d", i, s.key, ok, n, s.ok, s.suppressed)
		}
	}
}

// TestKeyBound: beyond MaxKeys distinct lines, the rest share one entry:
// still at most one line of them per interval.
func TestKeyBound(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	l := New(time.Minute, clk.now)
	through := 0
	for i := range 3 * MaxKeys {
		if ok, _ := l.Allow(fmt.Sprintf("line %c%c", 'a'+i%26, 'a'+i/26%100)); ok {
			through++
		}
	}
	if through > MaxKeys+1 {
		t.Fatalf("%d lines through for %d keys, want at most %d", through, 3*MaxKeys, MaxKeys+1)
	}
	if len(l.keys) > MaxKeys+1 {
		t.Fatalf("%d keys kept, bound %d and the overflow entry", len(l.keys), MaxKeys)
	}
}

func TestKey(t *testing.T) {
	for in, want := range map[string]string{
		"write /v/meta/003477.sst: no space left on device": "write /v/meta/#.sst: no space left on device",
		"no digits": "no digits",
		"1 2 33":    "# # #",
	} {
		if got := Key(in); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
}
