package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spindle-store/spindle/internal/backoff"
	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// Defaults and limits of Options.
const (
	DefaultWindow         = 256
	DefaultConnsPerMember = 1
	MaxConnsPerMember     = 64
	DefaultMaxAttempts    = 100
	MaxMaxAttempts        = 10000
	DefaultRetryTimeout   = 30 * time.Second
	DefaultAttemptTimeout = 10 * time.Second
	// DefaultLeaderlessTimeout: see Options.LeaderlessTimeout. A pipeline
	// whose leader died elects another within about two election
	// timeouts (1-2 s each at the pipeline's defaults); one that lost a
	// majority never does, and the meta service replaces it only once
	// those members are STALE (5 s): 4 s lets the first kind finish and
	// frees the writers of the second before the replacement exists.
	DefaultLeaderlessTimeout = 4 * time.Second
	DefaultDialTimeout       = 2 * time.Second
	// DefaultProbeAfter and DefaultProbeTimeout: see Options.ProbeAfter.
	// A member that answers none of its requests for a second is asked
	// whether it runs at all; one that cannot answer that within a
	// second more (a stopped or frozen process, whose kernel still
	// accepts connections and buffers requests) has its requests failed
	// and retried elsewhere: about 2-2.5 s instead of AttemptTimeout,
	// by when the rest of a pipeline has elected another leader (1-2 s).
	DefaultProbeAfter   = 1 * time.Second
	DefaultProbeTimeout = 1 * time.Second
	DefaultMinBackoff   = 2 * time.Millisecond
	DefaultMaxBackoff   = 250 * time.Millisecond
	// MaxMembers bounds the addresses a Client keeps connections to: the
	// members it was given plus leaders it was redirected to.
	MaxMembers = 64
)

var (
	// ErrClosed is any call on a Client after Close.
	ErrClosed = errors.New("client: closed")
	// ErrNoLeader marks a write that gave up after
	// Options.LeaderlessTimeout without any member accepting it as the
	// leader (the pipeline lost its leader and has not elected one: a
	// majority of it down or cut off). It wraps the last attempt's error.
	ErrNoLeader = errors.New("client: no leader")
	// ErrCorrupt marks data read back that does not match its checksums
	// (or a response that does not describe what was asked).
	ErrCorrupt = errors.New("client: corrupt read")
	// ErrUnresponsive marks an attempt failed because its member answered
	// neither its requests nor a probe (Options.ProbeAfter); it is
	// retried on the next member like a broken connection.
	ErrUnresponsive = errors.New("client: member unresponsive")
)

// Options configures a Client. Zero fields take the defaults above.
type Options struct {
	// BytesPerChecksum is the checksum piece size of WriteChunk (default
	// engine.DefaultBytesPerChecksum, 16 KiB).
	BytesPerChecksum uint32
	// Window is the most requests in flight on one connection (default
	// DefaultWindow; clamped to transport.MaxWindow).
	Window int
	// ConnsPerMember is the number of connections kept to each member
	// (default 1, at most MaxConnsPerMember); requests are spread over them
	// round-robin.
	ConnsPerMember int
	// MaxAttempts bounds the attempts of one operation (default
	// DefaultMaxAttempts, at most MaxMaxAttempts).
	MaxAttempts int
	// RetryTimeout bounds the total time of one operation, all attempts
	// and backoffs included (default DefaultRetryTimeout).
	RetryTimeout time.Duration
	// AttemptTimeout bounds one attempt: waiting for a window slot and for
	// the response (default DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// LeaderlessTimeout bounds, for a write, the time from its first
	// failed attempt while no member answers as the leader (NOT_LEADER,
	// UNAVAILABLE, unreachable): past it the write gives up with
	// ErrNoLeader (default DefaultLeaderlessTimeout), so that its caller
	// can go on on another pipeline instead of waiting out RetryTimeout.
	LeaderlessTimeout time.Duration
	// DialTimeout bounds one dial (default DefaultDialTimeout).
	DialTimeout time.Duration
	// ProbeAfter: a member with requests outstanding on a connection
	// that has read no response for about this long is probed: a Ping
	// on a connection of its own, answered by the datanode's transport
	// server whatever its pipelines are doing. ProbeTimeout bounds the
	// probe (dial included); a member that does not answer it is
	// unresponsive: its connections are failed (ErrUnresponsive), it is
	// forgotten as the leader, and attempts on it fail at once, each
	// starting a probe, until one is answered. Defaults
	// DefaultProbeAfter and DefaultProbeTimeout; a negative ProbeAfter
	// turns probing off (attempts then wait up to AttemptTimeout).
	ProbeAfter, ProbeTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause between attempts that
	// found no leader (defaults DefaultMinBackoff, DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// Conn configures the connections' framing.
	Conn transport.ConnConfig
	// Logger receives retries and reconnections at debug level (nil:
	// slog.Default()).
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.BytesPerChecksum == 0 {
		o.BytesPerChecksum = engine.DefaultBytesPerChecksum
	}
	if o.BytesPerChecksum < engine.MinBytesPerChecksum || o.BytesPerChecksum > engine.MaxBytesPerChecksum {
		return o, fmt.Errorf("client: bytes per checksum %d not in [%d, %d]", o.BytesPerChecksum, engine.MinBytesPerChecksum, engine.MaxBytesPerChecksum)
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	o.Window = min(o.Window, transport.MaxWindow)
	if o.ConnsPerMember <= 0 {
		o.ConnsPerMember = DefaultConnsPerMember
	}
	o.ConnsPerMember = min(o.ConnsPerMember, MaxConnsPerMember)
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	o.MaxAttempts = min(o.MaxAttempts, MaxMaxAttempts)
	if o.RetryTimeout <= 0 {
		o.RetryTimeout = DefaultRetryTimeout
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.LeaderlessTimeout <= 0 {
		o.LeaderlessTimeout = DefaultLeaderlessTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ProbeAfter == 0 {
		o.ProbeAfter = DefaultProbeAfter
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// BlockID names a block: its container and its local ID in it.
type BlockID struct {
	Container uint64
	Local     uint64
	// Token is the block token the meta service gave for the block
	// (package blocktoken), sent with each request on it; "": none.
	Token string
}

func (b BlockID) String() string { return fmt.Sprintf("%d/%d", b.Container, b.Local) }

// tokenBytes is s's bytes without a copy (a token is sent with every
// chunk): the encoder only reads them.
func tokenBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Chunk is the result of a ReadChunk: the bytes read (owned by the caller)
// and the checksums they were verified against.
type Chunk struct {
	Offset           uint64
	Data             []byte
	BytesPerChecksum uint32
	Checksums        []uint32
}

// Stats counts what a Client's retry machinery did, since New.
type Stats struct {
	Ops         uint64 // operations that succeeded
	Attempts    uint64 // attempts made (≥ Ops)
	Redirects   uint64 // NotLeader answers naming a leader, followed
	NoLeader    uint64 // NotLeader answers without a leader
	Unavailable uint64 // Unavailable answers
	Timeouts    uint64 // attempts that timed out
	ConnErrors  uint64 // attempts failed by a broken connection or a dial
	Dials       uint64 // connections dialled (successfully)
	// Probes counts Pings sent to members whose requests went
	// unanswered; Unresponsive, the probes unanswered (each failed the
	// member's connections and made it skipped until a probe answered).
	Probes, Unresponsive uint64
	// Batches is the number of gathered writes of the connections open
	// now (requests per batch = how well callers share a connection).
	Batches uint64
}

// Client is a pipeline client. See the package comment.
type Client struct {
	pipelineID uint64
	opts       Options
	log        *slog.Logger

	mu      sync.Mutex // guards members' list (appends) and closed
	members []*member  // the configured members first, then redirect targets
	closed  bool

	leader atomic.Pointer[member] // last member known to lead; nil: unknown

	ops, attempts, redirects, noLeader, unavailable, timeouts, connErrors, dials atomic.Uint64
	probes, unresponsive                                                         atomic.Uint64

	// watching: the probe monitor (probe.go) runs; it stops itself once
	// no connection has had requests outstanding for a while, and the
	// next attempt starts it again.
	watching atomic.Bool
}

// member is one datanode address and its connection slots.
type member struct {
	addr  string
	index int
	rr    atomic.Uint32
	slots []connSlot

	// Liveness (probe.go). probing: a probe of this member runs (at most
	// one); unresponsive: the last probe went unanswered.
	probing      atomic.Bool
	unresponsive atomic.Bool
}

// connSlot is one lazily dialled connection. mu serialises dials; the
// current client is read without it.
type connSlot struct {
	mu sync.Mutex
	c  atomic.Pointer[transport.Client]

	// Owned by the probe monitor: the connection it watched at its
	// last tick, the responses it had read then, and for how many
	// ticks in a row it had requests outstanding and read none.
	watched    *transport.Client
	seenRecv   uint64
	quietTicks int
}

// New returns a Client of the pipeline pipelineID whose members listen at
// addrs (host:port). Nothing is dialled until the first request.
func New(addrs []string, pipelineID uint64, opts Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("client: no member addresses")
	}
	if len(addrs) > MaxMembers {
		return nil, fmt.Errorf("client: %d members, at most %d", len(addrs), MaxMembers)
	}
	c := &Client{pipelineID: pipelineID, opts: o, log: o.Logger}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("client: member address %q: %w", a, err)
		}
		if c.lookup(a) != nil {
			return nil, fmt.Errorf("client: member address %q given twice", a)
		}
		c.members = append(c.members, c.newMember(a))
	}
	return c, nil
}

func (c *Client) newMember(addr string) *member {
	return &member{addr: addr, index: len(c.members), slots: make([]connSlot, c.opts.ConnsPerMember)}
}

// lookup returns the member of addr; the caller holds c.mu (or owns c).
func (c *Client) lookup(addr string) *member {
	for _, m := range c.members {
		if m.addr == addr {
			return m
		}
	}
	return nil
}

// memberFor returns the member of addr, adding it (a leader the Client was
// redirected to that it was not told about) while there is room.
func (c *Client) memberFor(addr string) (*member, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if m := c.lookup(addr); m != nil {
		return m, nil
	}
	if len(c.members) >= MaxMembers {
		return nil, fmt.Errorf("client: redirected to %s: already %d member addresses", addr, MaxMembers)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("client: redirected to bad address %q: %w", addr, err)
	}
	m := c.newMember(addr)
	c.members = append(c.members, m)
	return m, nil
}

// next returns the member after m in the list (round robin).
func (c *Client) next(m *member) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[(m.index+1)%len(c.members)]
}

// Members returns the member addresses the Client knows (the configured
// ones first).
func (c *Client) Members() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.addr
	}
	return out
}

// PipelineID returns the pipeline the Client writes to.
func (c *Client) PipelineID() uint64 { return c.pipelineID }

// Leader returns the address of the member that last acknowledged a write
// or named itself leader in a redirect; "" when unknown.
func (c *Client) Leader() string {
	if m := c.leader.Load(); m != nil {
		return m.addr
	}
	return ""
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	var batches uint64
	c.mu.Lock()
	for _, m := range c.members {
		for i := range m.slots {
			if tc := m.slots[i].c.Load(); tc != nil {
				batches += tc.Batches()
			}
		}
	}
	c.mu.Unlock()
	return Stats{Batches: batches,
		Ops: c.ops.Load(), Attempts: c.attempts.Load(), Redirects: c.redirects.Load(),
		NoLeader: c.noLeader.Load(), Unavailable: c.unavailable.Load(), Timeouts: c.timeouts.Load(),
		ConnErrors: c.connErrors.Load(), Dials: c.dials.Load(),
		Probes: c.probes.Load(), Unresponsive: c.unresponsive.Load(),
	}
}

// Close closes every connection. Calls in flight fail; later calls return
// ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	members := slices.Clone(c.members)
	c.mu.Unlock()
	for _, m := range members {
		for i := range m.slots {
			s := &m.slots[i]
			s.mu.Lock()
			if tc := s.c.Swap(nil); tc != nil {
				closeQuietly(tc)
			}
			s.mu.Unlock()
		}
	}
	return nil
}

// memberList returns the members known now.
func (c *Client) memberList() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// conn returns a connection to m, dialling one if its slot is empty or
// broken (a connection the server closed while it was idle is found broken
// here, its reader having seen the close): the slot t pins, else the next
// one round robin.
func (c *Client) conn(ctx context.Context, m *member, t target) (*transport.Client, error) {
	i := uint64(m.rr.Add(1))
	if t.pinned {
		i = t.pin
	}
	s := &m.slots[i%uint64(len(m.slots))]
	if tc := s.c.Load(); tc != nil && tc.Err() == nil {
		return tc, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tc := s.c.Load(); tc != nil {
		if tc.Err() == nil {
			return tc, nil
		}
		// Broken while unused (the server closed it: idle timeout,
		// restart): redialled here rather than failing an attempt.
		if s.c.CompareAndSwap(tc, nil) {
			closeQuietly(tc)
		}
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	tc, err := transport.DialClient(dctx, m.addr, transport.ClientConfig{
		Conn: c.opts.Conn, Window: c.opts.Window, RequestTimeout: c.opts.AttemptTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.dials.Add(1)
	c.log.Debug("client: connected", "addr", m.addr)
	s.c.Store(tc)
	if c.isClosed() { // closed while dialling: Close may have missed it
		if s.c.CompareAndSwap(tc, nil) {
			closeQuietly(tc)
		}
		return nil, ErrClosed
	}
	return tc, nil
}

// drop forgets tc (broken) in m's slots and closes it.
func (c *Client) drop(m *member, tc *transport.Client) {
	for i := range m.slots {
		if m.slots[i].c.CompareAndSwap(tc, nil) {
			closeQuietly(tc)
			c.log.Debug("client: connection dropped", "addr", m.addr, "err", tc.Err())
			return
		}
	}
}

// call is one attempt of an operation on one connection.
type call func(ctx context.Context, tc *transport.Client) error

// target says where an operation goes.
type target struct {
	addr  string // "": the leader (or any member)
	write bool   // follows redirects and records the leader
	// pinned: every attempt uses the connection slot pin (modulo
	// ConnsPerMember) of its member, not the next one round robin — a
	// block's writes share one connection, so that they arrive in the
	// order they were queued.
	pinned bool
	pin    uint64
}

// blockTarget is the target of a write of block b: the leader, on the
// connection slot of b.
func blockTarget(b BlockID) target {
	// Fibonacci hashing spreads consecutive local IDs over the slots.
	return target{write: true, pinned: true, pin: (b.Container*0x9e3779b97f4a7c15 ^ b.Local) * 0x9e3779b97f4a7c15 >> 32}
}

// do runs op with the retry policy of the package comment.
func (c *Client) do(ctx context.Context, name string, t target, op call) error {
	start := time.Now()
	deadline := start.Add(c.opts.RetryTimeout)
	var m *member
	if t.addr != "" {
		var err error
		if m, err = c.memberFor(t.addr); err != nil {
			return fmt.Errorf("client: %s: %w", name, err)
		}
	} else if m = c.leader.Load(); m == nil {
		c.mu.Lock()
		m = c.members[0]
		c.mu.Unlock()
	}
	delay := c.opts.MinBackoff
	sinceLeader := 0 // consecutive attempts without a usable leader
	var firstFailure time.Time
	for attempt := 1; ; attempt++ {
		c.attempts.Add(1)
		err := c.attempt(ctx, m, t, op)
		if err == nil {
			c.ops.Add(1)
			if t.write && c.leader.Load() != m {
				c.leader.Store(m)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s at %s: %w", name, m.addr, err)
		}
		if c.isClosed() {
			return fmt.Errorf("client: %s: %w", name, ErrClosed)
		}
		wait := false
		at := m
		var se *transport.StatusError
		switch {
		case errors.As(err, &se) && se.Status == transport.StatusNotLeader && t.write:
			c.forgetLeader(m)
			sinceLeader++
			if se.Leader != "" && se.Leader != m.addr {
				c.redirects.Add(1)
				lm, merr := c.memberFor(se.Leader)
				if merr != nil {
					return fmt.Errorf("client: %s: %w", name, merr)
				}
				c.leader.Store(lm)
				m = lm
				// A redirect is followed at once, unless redirects
				// go round in circles (stale leader hints).
				wait = sinceLeader > len(c.members)
			} else {
				c.noLeader.Add(1)
				m = c.nextFor(t, m)
				wait = sinceLeader >= len(c.members)
			}
		case errors.As(err, &se) && se.Status == transport.StatusUnavailable:
			c.unavailable.Add(1)
			sinceLeader++
			wait = true
			if sinceLeader%3 == 0 {
				m = c.nextFor(t, m)
			}
		case errors.As(err, &se):
			return fmt.Errorf("client: %s at %s: %w", name, m.addr, err) // a final status
		case errors.Is(err, transport.ErrTooLarge), errors.Is(err, transport.ErrInvalid),
			errors.Is(err, ErrClosed), errors.Is(err, ErrCorrupt):
			return fmt.Errorf("client: %s at %s: %w", name, m.addr, err)
		case errors.Is(err, ErrUnresponsive) && t.addr != "":
			// Addressed to this member only: its caller (a reader of
			// one replica) goes on to another one sooner than retries
			// here would.
			return fmt.Errorf("client: %s at %s: %w", name, m.addr, err)
		default: // dial failure, broken connection, attempt timeout
			if errors.Is(err, context.DeadlineExceeded) {
				c.timeouts.Add(1)
			} else {
				c.connErrors.Add(1)
			}
			c.forgetLeader(m)
			m = c.nextFor(t, m)
			sinceLeader++
			wait = sinceLeader >= len(c.members)
		}
		left := time.Until(deadline)
		if attempt >= c.opts.MaxAttempts || left <= 0 {
			return fmt.Errorf("client: %s: gave up after %d attempts in %v, last at %s: %w",
				name, attempt, time.Since(start).Round(time.Millisecond), at.addr, err)
		}
		// Every failure that reaches here is one without a usable
		// leader (the others returned above).
		if firstFailure.IsZero() {
			firstFailure = time.Now()
		}
		if t.write && time.Since(firstFailure) >= c.opts.LeaderlessTimeout {
			return fmt.Errorf("client: %s: %w for %v (%d attempts), last at %s: %w",
				name, ErrNoLeader, time.Since(firstFailure).Round(time.Millisecond), attempt, at.addr, err)
		}
		c.log.Debug("client: retrying", "op", name, "attempt", attempt, "failed_at", at.addr, "next", m.addr, "err", err)
		if wait {
			if !backoff.Sleep(ctx, min(backoff.Jitter(delay), left)) {
				return fmt.Errorf("client: %s: %w (last error at %s: %w)", name, ctx.Err(), at.addr, err)
			}
			delay = min(2*delay, c.opts.MaxBackoff)
		}
	}
}

// nextFor is the member to try after m failed: m itself for an addressed
// operation, else the next one.
func (c *Client) nextFor(t target, m *member) *member {
	if t.addr != "" {
		return m
	}
	return c.next(m)
}

func (c *Client) forgetLeader(m *member) { c.leader.CompareAndSwap(m, nil) }

// attempt makes one attempt on m.
func (c *Client) attempt(ctx context.Context, m *member, t target, op call) error {
	if c.opts.ProbeAfter > 0 {
		if m.unresponsive.Load() {
			c.startProbe(m)
			return fmt.Errorf("%w: %s answered no probe within %v", ErrUnresponsive, m.addr, c.opts.ProbeTimeout)
		}
		if !c.watching.Load() {
			c.startWatching()
		}
	}
	tc, err := c.conn(ctx, m, t)
	if err != nil {
		return err
	}
	// Without a deadline on ctx the transport bounds the call by its
	// RequestTimeout (= AttemptTimeout), with no context to allocate: the
	// common case costs nothing here.
	actx := ctx
	if d, ok := ctx.Deadline(); ok && time.Until(d) > c.opts.AttemptTimeout {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.opts.AttemptTimeout)
		defer cancel()
	}
	err = op(actx, tc)
	if err != nil && tc.Err() != nil {
		c.drop(m, tc)
	}
	return err
}

// WriteChunk writes data at offset of block b through the pipeline, with
// checksums computed here (Options.BytesPerChecksum), and returns the
// chunk's description for the block's PutBlock.
func (c *Client) WriteChunk(ctx context.Context, b BlockID, offset uint64, data []byte) (transport.ChunkInfo, error) {
	sums := engine.ComputeChecksums(nil, data, c.opts.BytesPerChecksum)
	if err := c.WriteChunkChecksums(ctx, b, offset, data, c.opts.BytesPerChecksum, sums); err != nil {
		return transport.ChunkInfo{}, err
	}
	return transport.ChunkInfo{Offset: offset, Length: uint64(len(data)), Checksums: sums}, nil
}

// WriteChunkChecksums is WriteChunk with checksums the caller computed
// (CRC32C of every bytesPerChecksum piece of data).
func (c *Client) WriteChunkChecksums(ctx context.Context, b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, sums []uint32) error {
	return c.WriteChunkQueued(ctx, b, offset, data, bytesPerChecksum, sums, nil)
}

// WriteChunkQueued is WriteChunkChecksums that reports when its request is
// on its way: it calls queued (unless nil) exactly once, from the calling
// goroutine and before it returns — as soon as the first attempt that gets
// a connection has queued its request on it or given up before that
// (transport.Client.CallQueued), or when the write ends with no attempt
// having got that far (dial failures). A block's writes go
// on one connection per member (its slot, whatever ConnsPerMember), so
// writes of one block each started once the previous one's queued was
// called reach the leader in that order, and the leader proposes them in
// that order — unless one is retried (a leader change, a broken
// connection, an Unavailable answer): its retry goes after the writes
// started meanwhile.
func (c *Client) WriteChunkQueued(ctx context.Context, b BlockID, offset uint64, data []byte, bytesPerChecksum uint32, sums []uint32, queued func()) error {
	if queued != nil {
		defer func() {
			if queued != nil {
				queued()
			}
		}()
	}
	if len(data) == 0 {
		return errors.New("client: WriteChunk: empty chunk")
	}
	if want := engine.PieceCount(uint64(len(data)), bytesPerChecksum); len(sums) != want {
		return fmt.Errorf("client: WriteChunk %s@%d: %d checksums for %d bytes at %d per checksum, want %d", b, offset, len(sums), len(data), bytesPerChecksum, want)
	}
	// once is handed to every attempt's Call; the first one that queues
	// its request calls queued, the others find it nil.
	var once func()
	if queued != nil {
		once = func() {
			if q := queued; q != nil {
				queued = nil
				q()
			}
		}
	}
	return c.do(ctx, "WriteChunk", blockTarget(b), func(ctx context.Context, tc *transport.Client) error {
		req := transport.WriteChunk{
			PipelineID: c.pipelineID, ContainerID: b.Container, LocalID: b.Local,
			Offset: offset, Length: uint64(len(data)), BytesPerChecksum: bytesPerChecksum, Checksums: sums, Token: tokenBytes(b.Token),
		}
		res, err := tc.CallQueued(ctx, once, &req, data)
		if err != nil {
			return err
		}
		res.Release()
		return nil
	})
}

// PutBlock commits a block's metadata through the pipeline, with the
// block's token ("": none).
func (c *Client) PutBlock(ctx context.Context, bd transport.BlockData, token string) error {
	return c.do(ctx, "PutBlock", blockTarget(BlockID{Container: bd.ContainerID, Local: bd.LocalID}), func(ctx context.Context, tc *transport.Client) error {
		req := transport.PutBlock{PipelineID: c.pipelineID, Block: bd, Token: tokenBytes(token)}
		res, err := tc.Call(ctx, &req)
		if err != nil {
			return err
		}
		res.Release()
		return nil
	})
}

// GetBlock returns block b's committed metadata as the member at addr has
// it ("" : the leader if known, else any member).
func (c *Client) GetBlock(ctx context.Context, addr string, b BlockID) (transport.BlockData, error) {
	var out transport.BlockData
	err := c.do(ctx, "GetBlock", target{addr: addr}, func(ctx context.Context, tc *transport.Client) error {
		req := transport.GetBlock{PipelineID: c.pipelineID, ContainerID: b.Container, LocalID: b.Local, Token: tokenBytes(b.Token)}
		res, err := tc.Call(ctx, &req)
		if err != nil {
			return err
		}
		defer res.Release()
		if !res.Response.HasBlock {
			return fmt.Errorf("%w: GetBlock %s: response without a block", ErrCorrupt, b)
		}
		out = cloneBlock(res.Response.Block)
		return nil
	})
	return out, err
}

// ReadChunk reads length bytes at offset of block b from the member at addr
// ("": the leader if known, else any member), verifying every piece against
// the checksums that come with it.
func (c *Client) ReadChunk(ctx context.Context, addr string, b BlockID, offset, length uint64) (Chunk, error) {
	ch, release, err := c.ReadChunkLent(ctx, addr, b, offset, length)
	if err != nil {
		return Chunk{}, err
	}
	ch.Data = slices.Clone(ch.Data)
	if ch.Data == nil {
		ch.Data = []byte{}
	}
	release()
	return ch, nil
}

// ReadChunkLent is ReadChunk without the copy: the chunk's Data is the
// response's buffer, lent from the transport's pool until release is
// called (once; neither Data nor any slice of it may be used after).
// Not calling release is safe — the garbage collector reclaims the
// buffer — but costs an allocation of the next response's buffer. A
// reader that streams the bytes on (the key client's gets) saves a copy
// of every byte read: 10 % of the CPU of a process serving 1 MiB GETs.
// Checksums is the caller's own.
func (c *Client) ReadChunkLent(ctx context.Context, addr string, b BlockID, offset, length uint64) (ch Chunk, release func(), err error) {
	err = c.do(ctx, "ReadChunk", target{addr: addr}, func(ctx context.Context, tc *transport.Client) error {
		req := transport.ReadChunk{PipelineID: c.pipelineID, ContainerID: b.Container, LocalID: b.Local, Offset: offset, Length: length, Token: tokenBytes(b.Token)}
		res, err := tc.Call(ctx, &req)
		if err != nil {
			return err
		}
		r := &res.Response
		if err := verify(r, res.Payload, offset, length); err != nil {
			res.Release()
			return fmt.Errorf("ReadChunk %s@%d+%d from %s: %w", b, offset, length, tc.RemoteAddr(), err)
		}
		// The one success: do returns at once after it.
		ch = Chunk{Offset: r.Offset, Data: res.Payload, BytesPerChecksum: r.BytesPerChecksum, Checksums: slices.Clone(r.Checksums)}
		release = res.Release
		return nil
	})
	if err != nil {
		return Chunk{}, nil, err
	}
	if ch.Data == nil {
		ch.Data = []byte{}
	}
	return ch, release, nil
}

// verify checks a ReadChunk response: the range asked for, and every piece
// against its checksum.
func verify(r *transport.Response, data []byte, offset, length uint64) error {
	if r.Offset != offset || uint64(len(data)) != length {
		return fmt.Errorf("%w: got %d bytes at %d", ErrCorrupt, len(data), r.Offset)
	}
	if length == 0 {
		return nil
	}
	bpc := r.BytesPerChecksum
	if bpc == 0 {
		return fmt.Errorf("%w: no bytes per checksum", ErrCorrupt)
	}
	if want := engine.PieceCount(length, bpc); len(r.Checksums) != want {
		return fmt.Errorf("%w: %d checksums for %d bytes at %d per checksum, want %d", ErrCorrupt, len(r.Checksums), length, bpc, want)
	}
	for i, off := 0, 0; off < len(data); i, off = i+1, off+int(bpc) {
		end := min(off+int(bpc), len(data))
		if got := engine.CRC32C(data[off:end]); got != r.Checksums[i] {
			return fmt.Errorf("%w: piece %d (bytes %d..%d of the block): crc32c %08x, checksum %08x", ErrCorrupt, i, offset+uint64(off), offset+uint64(end), got, r.Checksums[i])
		}
	}
	return nil
}

func cloneBlock(b transport.BlockData) transport.BlockData {
	out := b
	out.Chunks = make([]transport.ChunkInfo, len(b.Chunks))
	for i, ch := range b.Chunks {
		out.Chunks[i] = transport.ChunkInfo{Offset: ch.Offset, Length: ch.Length, Checksums: slices.Clone(ch.Checksums)}
	}
	return out
}
