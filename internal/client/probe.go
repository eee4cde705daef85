package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spindle-store/spindle/internal/transport"
)

// Liveness probing (Options.ProbeAfter).
//
// A datanode process that is stopped (SIGSTOP), frozen or wedged in the
// kernel still has a kernel that accepts connections and buffers
// requests, so nothing fails fast: every request to it waits out its
// AttemptTimeout (10 s), and a pipeline it led stalls its writers for
// that long although the other members elect a new leader in 1-2 s
// (CHAOS_FINDINGS §2). A slow member is not that: it still reads its
// connections and answers a Ping at once.
//
// The monitor, one goroutine per Client while any connection has
// requests outstanding, ticks every ProbeAfter/2 and, per connection,
// compares the responses read (transport.Client.Received) with its last
// tick: two ticks in a row with requests outstanding and no response
// read start a probe of the member. A probe dials a connection of its own
// and sends one Ping, both within ProbeTimeout. An answer (or any error
// other than running out of time: a refused connection, a server too old
// to know Ping closing it) means the process runs; silence means it does
// not: the member's connections are aborted with ErrUnresponsive (their
// requests retried on the next member), it is forgotten as the leader,
// and attempts on it fail at once, each starting a probe, until a probe
// is answered.
//
// Invariants: at most one probe per member at a time (member.probing); at
// most one monitor per Client (Client.watching); the monitor owns the
// slots' watched/seenRecv/quietTicks fields; a probe never waits longer
// than ProbeTimeout; probing costs the hot path two atomic loads per
// attempt and the transport one atomic add per response.

// monitorIdleTicks: ticks with no request outstanding anywhere after which
// the monitor stops (the next attempt starts it again).
const monitorIdleTicks = 4

// startWatching starts the monitor unless it runs.
func (c *Client) startWatching() {
	if c.watching.CompareAndSwap(false, true) {
		go c.monitor()
	}
}

// monitor watches the connections for requests left unanswered (see above).
func (c *Client) monitor() {
	tick := time.NewTicker(max(c.opts.ProbeAfter/2, time.Millisecond)) // a ticker needs > 0
	defer tick.Stop()
	idle := 0
	for range tick.C {
		if c.isClosed() {
			c.watching.Store(false)
			return
		}
		if c.watchTick() {
			idle = 0
			continue
		}
		if idle++; idle < monitorIdleTicks {
			continue
		}
		// Stop, unless a request went out meanwhile whose attempt saw
		// the monitor running and so did not start it. (The check
		// changes no slot: once watching is false, a new monitor may
		// own them.)
		c.watching.Store(false)
		if !c.anyOutstanding() || !c.watching.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// anyOutstanding reports whether any connection has requests outstanding.
func (c *Client) anyOutstanding() bool {
	for _, m := range c.memberList() {
		for i := range m.slots {
			if tc := m.slots[i].c.Load(); tc != nil && tc.Err() == nil && tc.Outstanding() > 0 {
				return true
			}
		}
	}
	return false
}

// watchTick checks every connection once and starts the probes due. It
// reports whether any connection had requests outstanding.
func (c *Client) watchTick() (busy bool) {
	for _, m := range c.memberList() {
		stalled := false
		for i := range m.slots {
			s := &m.slots[i]
			tc := s.c.Load()
			if tc == nil || tc.Err() != nil || tc.Outstanding() == 0 {
				s.watched, s.quietTicks = nil, 0
				continue
			}
			busy = true
			if r := tc.Received(); tc != s.watched || r != s.seenRecv {
				s.watched, s.seenRecv, s.quietTicks = tc, r, 0
				continue
			}
			if s.quietTicks++; s.quietTicks >= 2 {
				stalled = true
			}
		}
		if stalled && !m.unresponsive.Load() {
			c.startProbe(m)
		}
	}
	return busy
}

// startProbe probes m unless a probe of it runs.
func (c *Client) startProbe(m *member) {
	if m.probing.CompareAndSwap(false, true) {
		go c.probe(m)
	}
}

// probe asks m whether it runs (see above) and acts on the answer.
func (c *Client) probe(m *member) {
	defer m.probing.Store(false)
	c.probes.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ProbeTimeout)
	defer cancel()
	err := c.ping(ctx, m.addr)
	if err == nil || (ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded)) {
		// Answered, or refused before the time was up: it runs (a
		// dead process's connections fail on their own).
		if m.unresponsive.CompareAndSwap(true, false) {
			c.log.Info("client: member answers again", "addr", m.addr)
		}
		return
	}
	c.unresponsive.Add(1)
	first := m.unresponsive.CompareAndSwap(false, true)
	c.forgetLeader(m)
	abort := fmt.Errorf("%w: %s answered no probe within %v", ErrUnresponsive, m.addr, c.opts.ProbeTimeout)
	for i := range m.slots {
		if tc := m.slots[i].c.Load(); tc != nil {
			tc.Abort(abort)
		}
	}
	if first {
		c.log.Warn("client: member unresponsive: its requests go to the other members until it answers a probe",
			"addr", m.addr, "pipeline", c.pipelineID, "err", err)
	}
}

// ping dials addr and sends one Ping, within ctx.
func (c *Client) ping(ctx context.Context, addr string) error {
	tc, err := transport.DialClient(ctx, addr, transport.ClientConfig{Conn: c.opts.Conn, Window: 1})
	if err != nil {
		return err
	}
	defer closeQuietly(tc)
	res, err := tc.Call(ctx, &transport.Ping{})
	if err != nil {
		return err
	}
	res.Release()
	return nil
}
