// Package readlease is a meta leader's read lease (issue 36 item 3): the
// time during which the leader may answer a linearizable read without a
// ReadIndex round of its own, because no other member can have become
// leader meanwhile.
//
// # Why it is safe
//
// The members run raft with CheckQuorum and PreVote. A follower that heard
// from its leader within the last ElectionTicks ticks refuses every vote
// and pre-vote (raft's inLease check) except a forced one (a leadership
// transfer's), and does not campaign itself before ElectionTicks ticks.
// When a ReadIndex round started at time S is confirmed, a quorum
// acknowledged a heartbeat the leader sent after S; each of them reset its
// election timer when it received it, after S. A new leader needs votes
// of a quorum, which includes one of those: it cannot be elected before S
// plus ElectionTicks-2 ticks (a Go ticker delivers at most one tick late
// and one early, so ElectionTicks-2 full tick intervals pass before a
// follower counts ElectionTicks). The lease therefore runs from S (not
// from the confirmation) for Duration(ElectionTicks, tick) = (ElectionTicks
// - 2) ticks less a 10 % clock-drift margin, and only on the member that
// confirmed the round, in the same stint (term of leadership).
//
// What ends a lease early (Revoke): a leadership transfer (its forced
// campaign bypasses the followers' refusal), a membership change (another
// quorum), the end of the stint. A round started before the last Revoke
// grants nothing (Epoch), and once a transfer began in a stint no round of
// that stint grants a lease again (NoMoreIn): a transfer's TimeoutNow may
// arrive late.
//
// # Concurrency
//
// A Lease is safe for concurrent use: Valid is called by request
// goroutines (one atomic load of a pointer), the rest by the raft
// goroutine.
package readlease

import (
	"sync"
	"sync/atomic"
	"time"
)

// Duration is the lease of a ReadIndex round with these raft settings (0:
// no lease: too few ticks to keep a margin).
func Duration(electionTicks int, tick time.Duration) time.Duration {
	if electionTicks < 4 || tick <= 0 {
		return 0
	}
	return time.Duration(electionTicks-2) * tick * 9 / 10
}

// grant is one lease: reads of stint until (monotonic clock).
type grant struct {
	stint uint64
	until time.Time
}

// Lease is a member's read lease; the zero value holds none. Dur is
// Duration's figure (0: never a lease).
type Lease struct {
	Dur time.Duration
	cur atomic.Pointer[grant]

	mu       sync.Mutex
	epoch    uint64
	noMoreIn uint64 // a stint in which a transfer began: no new grant
	// renewed: when the latest renewal round was asked for (unix ns).
	renewed atomic.Int64
}

// Round is what a ReadIndex round records at its start, before raft
// sends its heartbeats (Start), for Granted at its confirmation.
type Round struct {
	Stint uint64
	At    time.Time
	epoch uint64
}

// Start returns the record of a round of stint starting now.
func (l *Lease) Start(stint uint64) Round {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Round{Stint: stint, At: time.Now(), epoch: l.epoch}
}

// Valid reports whether a read of stint (non-zero) may be answered now
// without a round of its own; half, whether the lease is past its half
// (time to renew it with a round nobody waits for).
func (l *Lease) Valid(stint uint64, now time.Time) (ok, half bool) {
	g := l.cur.Load()
	if g == nil || stint == 0 || g.stint != stint || !now.Before(g.until) {
		return false, false
	}
	return true, g.until.Sub(now) < l.Dur/2
}

// Granted records the confirmation of round (by a quorum, on the member
// that leads its stint): the lease runs from the round's start, unless a
// Revoke came since the round started or its stint saw a transfer.
func (l *Lease) Granted(round Round) {
	if l.Dur <= 0 || round.Stint == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if round.epoch != l.epoch || round.Stint == l.noMoreIn {
		return
	}
	until := round.At.Add(l.Dur)
	if g := l.cur.Load(); g != nil && g.stint == round.Stint && !until.After(g.until) {
		return // an older round: the lease runs longer already
	}
	l.cur.Store(&grant{stint: round.Stint, until: until})
}

// Revoke ends the lease now; rounds started before it grant nothing.
func (l *Lease) Revoke() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.cur.Store(nil)
}

// NoMoreIn revokes the lease and refuses new ones in stint (a leadership
// transfer began in it).
func (l *Lease) NoMoreIn(stint uint64) {
	l.Revoke()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.noMoreIn = stint
}

// StartRenewal reports whether the caller should ask for a renewal round:
// at most one per quarter lease, however many readers find it past its
// half.
func (l *Lease) StartRenewal(now time.Time) bool {
	last := l.renewed.Load()
	if now.UnixNano()-last < int64(l.Dur/4) {
		return false
	}
	return l.renewed.CompareAndSwap(last, now.UnixNano())
}
