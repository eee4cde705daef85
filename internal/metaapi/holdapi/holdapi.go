// Package holdapi is the wire form of object lock holds on the datanodes
// (issue 35 item 2, defence in depth): the meta service tells the
// datanodes that hold a locked version's blocks about its lock in a
// hold_blocks command (metaapi.Command with Kind, Container, Blocks and
// Hold), and a datanode acknowledges each block's hold, once it is
// durable there, in a later heartbeat (metaapi.Heartbeat.HeldBlocks).
// The datanode's block deletion then refuses a held block whatever asks
// for it (internal/datanode/holds); the meta side keeps the holds to
// deliver in internal/meta/holdmeta.
//
// Invariants: a Hold only ever grows on a datanode (a later retain-until
// date, a COMPLIANCE mode) except that Legal follows the meta service's
// latest word, and that a GOVERNANCE retention follows a Hold with Bypass
// (the meta service sends one only when a request permitted to bypass
// it shortened or removed the retention, or deleted the version);
// a COMPLIANCE retention is never shortened.
//
// Concurrency: types and pure functions only.
package holdapi

import "time"

// Kind is the metaapi.Command kind that carries a hold.
const Kind = "hold_blocks"

// MaxAcks bounds a heartbeat's HeldBlocks (the rest go in the next ones).
const MaxAcks = 10000

// Hold is a block's object lock as the datanode keeps it.
type Hold struct {
	// Until is the retain-until time in Unix seconds, UTC, rounded up
	// (0: no retention).
	Until int64 `json:"until,omitempty"`
	// Compliance: the retention is COMPLIANCE (never shortened); else
	// GOVERNANCE.
	Compliance bool `json:"compliance,omitempty"`
	// Legal: a legal hold is on.
	Legal bool `json:"legal,omitempty"`
	// Bypass: a GOVERNANCE retention shortened or removed by a request
	// permitted to bypass it (the datanode then takes Until as it is).
	Bypass bool `json:"bypass,omitempty"`
}

// InForce says the hold refuses a deletion at now.
func (h Hold) InForce(now time.Time) bool { return h.Legal || h.Until > now.Unix() }

// UntilOf is t as a Hold's Until: Unix seconds, rounded up (zero time: 0).
func UntilOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// Merge is what a datanode keeps when it holds cur and is told next: the
// legal hold as next says; the retention extended (later date; a
// COMPLIANCE mode taken), never shortened, except a GOVERNANCE one by a
// Bypass. The result never carries Bypass.
func Merge(cur, next Hold) Hold {
	out := Hold{Legal: next.Legal}
	switch {
	case cur.Compliance && cur.Until > 0:
		out.Until, out.Compliance = max(cur.Until, next.Until), true
	case next.Bypass:
		out.Until, out.Compliance = next.Until, next.Compliance && next.Until > 0
	default:
		out.Until = max(cur.Until, next.Until)
		out.Compliance = next.Compliance && next.Until > 0
	}
	return out
}

// Ack acknowledges a hold_blocks delivery: the datanode keeps (durably)
// the Merge of what it held and Hold, the hold as it was sent.
type Ack struct {
	Container uint64 `json:"container"`
	Local     uint64 `json:"local"`
	Hold      Hold   `json:"hold"`
}
