// Package certreg is the meta service's certificate registry and
// deny-list (issue 33): every certificate the meta service issues (a
// join, a renewal) is recorded — serial, name, role, hosts, issue time,
// not-after — and a revocation marks records revoked. The deny-list is
// the revoked serials whose certificates have not expired; every server
// polls it (certwatch) and refuses those certificates on every port.
//
// Records are replicated meta state, in the store
//
//	'Y' | serial (lower-case hex)  →  version u8 (1) | how u8 | issued u64 | not-after u64 | revoked u64 | name | role | hosts | crc u32
//
// (times: Unix ms, revoked 0 when not; strings: u16 length and bytes;
// hosts: u8 count and strings; crc: CRC32C of the bytes before it), written
// only through state.Mutate, so checkpoints, snapshots and backups carry
// them. A record whose certificate expired more than Retain ago is
// dropped by the next mutation (an expired certificate is refused anyway).
// At most MaxRecords are kept.
//
// Joins and renewals: issue.go.
//
// Concurrency: Registry's methods go through state.Mutate and state.Read
// (State.Mu); the join tokens and Limiter have their own locks.
package certreg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/spindle-store/spindle/internal/certapi"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Prefix is the first byte of a record's key.
const Prefix = 'Y'

const recordVersion = 1

// Retain is how long a record outlives its certificate; MaxRecords bounds
// the registry.
const (
	Retain     = time.Hour
	MaxRecords = 100_000
)

// How a record came to be.
const (
	HowJoin   = 1
	HowRenew  = 2
	HowRevoke = 3 // a serial revoked that no record named
)

var howNames = map[uint8]string{HowJoin: "join", HowRenew: "renew", HowRevoke: "revoke"}

// Registry is the records over a State, with this member's pending join
// tokens (issue.go) and the rates of joins and renewals.
type Registry struct {
	*state.State
	joins               joinTokens
	joinRate, renewRate *Limiter
}

// New is the registry of st.
func New(st *state.State) *Registry {
	return &Registry{State: st, joinRate: NewLimiter(JoinsPerSecond, JoinsPerSecond), renewRate: NewLimiter(RenewalsPerSecond, RenewalsPerSecond)}
}

func key(serial string) []byte { return append([]byte{Prefix}, serial...) }

type record struct {
	how                       uint8
	issued, notAfter, revoked time.Time
	name, role                string
	hosts                     []string
}

func putStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func (r record) encode() []byte {
	b := []byte{recordVersion, r.how}
	for _, t := range []time.Time{r.issued, r.notAfter, r.revoked} {
		var ms uint64
		if !t.IsZero() {
			ms = uint64(t.UnixMilli())
		}
		b = binary.LittleEndian.AppendUint64(b, ms)
	}
	b = putStr(putStr(b, r.name), r.role)
	b = append(b, uint8(len(r.hosts)))
	for _, h := range r.hosts {
		b = putStr(b, h)
	}
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

func decode(v []byte) (r record, err error) {
	bad := func(why string) (record, error) {
		return record{}, fmt.Errorf("%w: certificate record: %s", state.ErrCorrupt, why)
	}
	if len(v) < 2+24+2+2+1+4 {
		return bad("short")
	}
	body := v[:len(v)-4]
	if crc32c.Checksum(body) != binary.LittleEndian.Uint32(v[len(v)-4:]) {
		return bad("CRC mismatch")
	}
	if body[0] != recordVersion || howNames[body[1]] == "" {
		return bad(fmt.Sprintf("version %d, how %d", body[0], body[1]))
	}
	r.how = body[1]
	p := body[2:]
	times := make([]time.Time, 3)
	for i := range times {
		if ms := binary.LittleEndian.Uint64(p); ms != 0 {
			times[i] = time.UnixMilli(int64(ms))
		}
		p = p[8:]
	}
	r.issued, r.notAfter, r.revoked = times[0], times[1], times[2]
	str := func() (string, bool) {
		if len(p) < 2 {
			return "", false
		}
		n := int(binary.LittleEndian.Uint16(p))
		if len(p) < 2+n {
			return "", false
		}
		s := string(p[2 : 2+n])
		p = p[2+n:]
		return s, true
	}
	var ok1, ok2 bool
	r.name, ok1 = str()
	r.role, ok2 = str()
	if !ok1 || !ok2 || len(p) < 1 {
		return bad("truncated")
	}
	n := int(p[0])
	p = p[1:]
	for range n {
		h, ok := str()
		if !ok {
			return bad("truncated hosts")
		}
		r.hosts = append(r.hosts, h)
	}
	if len(p) != 0 {
		return bad("trailing bytes")
	}
	return r, nil
}

func (r record) api(serial string) certapi.Cert {
	c := certapi.Cert{Serial: serial, Name: r.name, Role: r.role, Hosts: r.hosts, IssuedAt: r.issued, NotAfter: r.notAfter, How: howNames[r.how]}
	if !r.revoked.IsZero() {
		t := r.revoked
		c.RevokedAt = &t
	}
	return c
}

// scan calls fn for each record, in serial order.
func (g *Registry) scan(fn func(serial string, r record)) error {
	return g.Scan(Prefix, func(k, v []byte) error {
		r, err := decode(v)
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		fn(string(k[1:]), r)
		return nil
	})
}

// Validate decodes every record (Open: a corrupt one refuses the store).
func Validate(st *state.State) error {
	return (&Registry{State: st}).scan(func(string, record) {})
}

// expired says r can go: its certificate expired more than Retain ago
// (a revoked serial of unknown lifetime is kept).
func expired(r record, now time.Time) bool {
	return !r.notAfter.IsZero() && now.After(r.notAfter.Add(Retain))
}

// prune adds to b the removal of expired records and returns how many
// records stay; caller holds State.Mu for writing.
func (g *Registry) prune(b *pebble.Batch, now time.Time) (int, error) {
	n := 0
	err := g.scan(func(serial string, r record) {
		if expired(r, now) {
			state.Del(b, key(serial))
		} else {
			n++
		}
	})
	return n, err
}

// Record records a certificate the meta service issued.
func (g *Registry) Record(c certapi.Cert, how uint8) error {
	_, err := state.Mutate(g.State, func() (struct{}, *pebble.Batch, error) {
		b := g.Store.NewBatch()
		n, err := g.prune(b, g.Cfg.Now())
		if err != nil {
			return struct{}{}, nil, errors.Join(err, b.Close())
		}
		if n >= MaxRecords {
			return struct{}{}, nil, errors.Join(fmt.Errorf("%w: %d certificate records", metaapi.ErrUnavailable, n), b.Close())
		}
		state.Set(b, key(c.Serial), record{how: how, issued: c.IssuedAt, notAfter: c.NotAfter, name: c.Name, role: c.Role, hosts: c.Hosts}.encode())
		return struct{}{}, b, nil
	})
	return err
}

// List is every record, by name then issue time.
func (g *Registry) List() ([]certapi.Cert, error) {
	return state.Read(g.State, func() ([]certapi.Cert, error) {
		var out []certapi.Cert
		err := g.scan(func(serial string, r record) { out = append(out, r.api(serial)) })
		sort.SliceStable(out, func(i, j int) bool {
			if out[i].Name != out[j].Name {
				return out[i].Name < out[j].Name
			}
			return out[i].IssuedAt.Before(out[j].IssuedAt)
		})
		return out, err
	})
}

// IsSerial says s looks like a serial: hexadecimal, 1..40 digits.
func IsSerial(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	return strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// Revoke revokes target: the serial it names (recorded or not; recorded
// as revoked either way) or, when no record has that serial, every
// record named target. ErrNotFound when it names nothing.
func (g *Registry) Revoke(target string) ([]string, error) {
	if target == "" || len(target) > 255 {
		return nil, fmt.Errorf("%w: revoke: want a serial or a certificate name", metaapi.ErrInvalid)
	}
	return state.Mutate(g.State, func() ([]string, *pebble.Batch, error) {
		now := g.Cfg.Now()
		byName := map[string]record{}
		var bySerial *record
		serial := strings.TrimLeft(strings.ToLower(target), "0")
		err := g.scan(func(s string, r record) {
			if s == serial {
				bySerial = &r
			}
			if r.name == target {
				byName[s] = r
			}
		})
		if err != nil {
			return nil, nil, err
		}
		hits := byName
		if bySerial != nil {
			hits = map[string]record{serial: *bySerial}
		}
		if len(hits) == 0 {
			if !IsSerial(target) {
				return nil, nil, fmt.Errorf("%w: no certificate recorded under the name %q (revoke by serial: openssl x509 -noout -serial -in CERT)", metaapi.ErrNotFound, target)
			}
			hits = map[string]record{serial: {how: HowRevoke}}
		}
		b := g.Store.NewBatch()
		var out []string
		for s, r := range hits {
			if r.revoked.IsZero() {
				r.revoked = now
			}
			state.Set(b, key(s), r.encode())
			out = append(out, s)
		}
		slices.Sort(out)
		return out, b, nil
	})
}

// Denied is the deny-list: the revoked serials not expired; its version
// is the latest revocation's time in Unix ms.
func (g *Registry) Denied() (certapi.DenyList, error) {
	return state.Read(g.State, func() (certapi.DenyList, error) {
		now := g.Cfg.Now()
		var l certapi.DenyList
		err := g.scan(func(s string, r record) {
			if r.revoked.IsZero() || !r.notAfter.IsZero() && now.After(r.notAfter) {
				return
			}
			l.Serials = append(l.Serials, s)
			l.Version = max(l.Version, uint64(r.revoked.UnixMilli()))
		})
		return l, err
	})
}

// IsRevoked says serial is revoked.
func (g *Registry) IsRevoked(serial string) (bool, error) {
	return state.Read(g.State, func() (bool, error) {
		v, closer, err := g.Store.Get(key(serial))
		if errors.Is(err, pebble.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		defer state.CloseInto(closer, &err, "read certificate record")
		r, err := decode(v)
		return err == nil && !r.revoked.IsZero(), err
	})
}

// Limiter is a token bucket: Allow takes a token when one is left; the
// bucket holds at most burst and refills at rate a second.
type Limiter struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

// NewLimiter is a full bucket.
func NewLimiter(rate, burst float64) *Limiter {
	return &Limiter{rate: rate, burst: burst, tokens: burst}
}

// Allow takes a token at now; false when none is left.
func (l *Limiter) Allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
