package liveness

import "testing"

// TestUpInTicks: a member noted active stays up for the window's ticks and
// no longer; however long the wall-clock gap between two ticks, only the
// ticks count (there is no clock here to stall); a member never noted is
// down.
func TestUpInTicks(t *testing.T) {
	tr := New()
	if tr.Up(2, 20) {
		t.Fatal("a member never heard from is up")
	}
	tr.Note(1, true)
	tr.Note(2, true)
	tr.Note(3, false)
	for i := range 19 {
		tr.Tick()
		tr.Note(1, true)
		tr.Note(2, false)
		if !tr.Up(2, 20) {
			t.Fatalf("member 2 down %d ticks after it was heard, within a window of 20", i+1)
		}
	}
	tr.Tick()
	if tr.Up(2, 20) {
		t.Fatal("member 2 up 20 ticks after it was last heard, window 20")
	}
	if !tr.Up(1, 20) || tr.Up(3, 20) {
		t.Fatalf("member 1 (heard each tick) up: %v, member 3 (never active) up: %v", tr.Up(1, 20), tr.Up(3, 20))
	}
}

// TestDown: the members not up, sorted; nothing known on a follower.
func TestDown(t *testing.T) {
	members := map[uint64]string{1: "a", 2: "b", 3: "c"}
	if got := Down(map[uint64]bool{1: true, 3: false}, members); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Down = %v, want [2 3]", got)
	}
	var none any
	if got := Down(none, members); got != nil {
		t.Fatalf("Down on a follower = %v, want nil", got)
	}
}
