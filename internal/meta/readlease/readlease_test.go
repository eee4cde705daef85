package readlease

import (
	"testing"
	"time"
)

func TestDurationStaysInsideTheElectionTimeout(t *testing.T) {
	if d := Duration(10, 100*time.Millisecond); d != 720*time.Millisecond {
		t.Fatalf("Duration(10, 100ms) = %s, want 8 ticks less 10 %%: 720ms", d)
	}
	if Duration(3, time.Second) != 0 || Duration(10, 0) != 0 {
		t.Fatal("a lease without room for its margin")
	}
}

func TestLeaseRunsFromTheRoundsStart(t *testing.T) {
	l := &Lease{Dur: time.Second}
	r := l.Start(7)
	r.At = r.At.Add(-600 * time.Millisecond) // a round that took 600 ms
	l.Granted(r)
	now := time.Now()
	if ok, half := l.Valid(7, now); !ok || !half {
		t.Fatalf("Valid = %v, %v: want valid, past its half", ok, half)
	}
	if ok, _ := l.Valid(8, now); ok {
		t.Fatal("valid for another stint")
	}
	if ok, _ := l.Valid(7, r.At.Add(time.Second)); ok {
		t.Fatal("valid at its end")
	}
}

func TestRevokeAndTransferEndIt(t *testing.T) {
	l := &Lease{Dur: time.Second}
	before := l.Start(7)
	l.Revoke()
	l.Granted(before)
	if ok, _ := l.Valid(7, time.Now()); ok {
		t.Fatal("a round started before a Revoke granted a lease")
	}
	l.Granted(l.Start(7))
	if ok, _ := l.Valid(7, time.Now()); !ok {
		t.Fatal("no lease from a round after the Revoke")
	}
	l.NoMoreIn(7)
	if ok, _ := l.Valid(7, time.Now()); ok {
		t.Fatal("valid after a transfer began")
	}
	l.Granted(l.Start(7))
	if ok, _ := l.Valid(7, time.Now()); ok {
		t.Fatal("a lease granted in a stint that saw a transfer")
	}
	l.Granted(l.Start(8))
	if ok, _ := l.Valid(8, time.Now()); !ok {
		t.Fatal("no lease in the next stint")
	}
}

func TestOneRenewalPerQuarterLease(t *testing.T) {
	l := &Lease{Dur: time.Second}
	now := time.Now()
	if !l.StartRenewal(now) || l.StartRenewal(now.Add(100*time.Millisecond)) {
		t.Fatal("want one renewal, then none within a quarter lease")
	}
	if !l.StartRenewal(now.Add(300 * time.Millisecond)) {
		t.Fatal("no renewal after a quarter lease")
	}
}
