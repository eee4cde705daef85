// Package liveness says which members of a raft group its leader heard
// from lately, counted in the leader's raft ticks rather than in wall
// time.
//
// Why ticks: raft's own quorum check (CheckQuorum) counts in ticks, and a
// stall of the goroutine that ticks (a busy machine, a GC pause, a test
// binary under -race) delays the ticks and the processing of answers
// alike. Counted in wall time, a stall longer than the window made every
// follower look down at the next tick although each had answered, and the
// leader refused membership changes as leaving 1 of 3 voters up.
//
// Invariants: a member is up only if it was noted active within the last
// window ticks; a member never noted is down. Concurrency: a Tracker is
// not safe for concurrent use; the raft goroutine owns it.
package liveness

import "slices"

// Tracker holds the tick at which each member was last noted active.
type Tracker struct {
	ticks uint64
	last  map[uint64]uint64
}

// New returns a Tracker at tick 0 that has heard from no one.
func New() *Tracker { return &Tracker{last: map[uint64]uint64{}} }

// Tick advances the clock by one raft tick.
func (t *Tracker) Tick() { t.ticks++ }

// Note records member id as active at the current tick when active is
// true (raft's Progress.RecentActive, or the leader itself).
func (t *Tracker) Note(id uint64, active bool) {
	if active {
		t.last[id] = t.ticks
	}
}

// Up reports whether member id was noted active within the last
// windowTicks ticks.
func (t *Tracker) Up(id, windowTicks uint64) bool {
	at, ok := t.last[id]
	return ok && t.ticks-at < windowTicks
}

// Down lists, sorted, the members of members that active (the leader's
// last up map, a map[uint64]bool) does not say are up; nil when active is
// not a map (a follower knows nothing of the others).
func Down[V any](active any, members map[uint64]V) []uint64 {
	up, ok := active.(map[uint64]bool)
	if !ok || up == nil {
		return nil
	}
	var out []uint64
	for id := range members {
		if !up[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
