// Package lograte bounds how often one repeated log line is written: at
// most one line per key per interval, the line that gets through saying
// how many of its repeats were held back since the last one. It is what
// keeps a datanode on a full volume, whose metadata store retries a failed
// flush in a loop, from filling its log disk next (issue 31).
//
// A key names "the same line": Key(msg) is the message with every run of
// digits replaced by '#', so that "write 003477.sst: no space left on
// device" and "write 003478.sst: …" are one line repeated.
//
// Invariants: for one key, at most one Allow in any interval of Interval
// returns true; every false is counted once and reported by the next true.
// At most MaxKeys keys are tracked: a key beyond them shares one overflow
// entry (the MaxKeys+1st) (so the bound holds, coarser), and entries idle for an interval
// are dropped first.
//
// Concurrency: a Limiter is safe for concurrent use; the clock (Now) is
// called with its lock held.
package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultInterval is the bound: one line a minute per key.
	DefaultInterval = time.Minute
	// MaxKeys bounds the keys a Limiter remembers.
	MaxKeys = 1024
	// overflowKey is the shared entry of the keys beyond MaxKeys.
	overflowKey = "\x00overflow"
)

// Limiter rate-limits log lines by key. The zero value is not usable: New.
type Limiter struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	last       time.Time // when a line last got through
	suppressed int       // held back since
}

// New returns a Limiter letting one line per key through every interval
// (<= 0: DefaultInterval), reading the time from now (nil: time.Now; a
// test passes a fake clock).
func New(interval time.Duration, now func() time.Time) *Limiter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{interval: interval, now: now, keys: map[string]*entry{}}
}

// Allow says whether a line for key may be written now and, when it may,
// how many lines for key were held back since the last one written.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= MaxKeys {
			l.evictLocked(now)
		}
		if len(l.keys) >= MaxKeys {
			key = overflowKey
			e = l.keys[key]
		}
	}
	if e == nil {
		l.keys[key] = &entry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.interval {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}

// evictLocked drops the entries idle for an interval with nothing held
// back (their next line would get through anyway).
func (l *Limiter) evictLocked(now time.Time) {
	for k, e := range l.keys {
		if e.suppressed == 0 && now.Sub(e.last) >= l.interval {
			delete(l.keys, k)
		}
	}
}

// Log writes msg at level to log unless a line of the same Key(msg) got
// through less than an interval ago; a line that gets through after
// repeats were held back carries "suppressed" (their count) and
// "suppressed_for" (the interval).
func (l *Limiter) Log(log *slog.Logger, level slog.Level, msg string, args ...any) {
	ok, n := l.Allow(Key(msg))
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n, "suppressed_for", l.interval.String())
	}
	log.Log(context.Background(), level, msg, args...)
}

// Key is msg with every run of decimal digits replaced by one '#': file
// numbers, offsets and counts do not make a line a different one.
func Key(msg string) string {
	var b strings.Builder
	b.Grow(len(msg))
	digits := false
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteByte(c)
	}
	return b.String()
}
