package certreg

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
)

// TestRecordBytes: a record decodes to what was encoded; a flipped byte,
// a truncated or extended record, an unknown version or how are corrupt.
func TestRecordBytes(t *testing.T) {
	now := time.UnixMilli(1_765_000_000_000)
	r := record{how: HowRenew, issued: now, notAfter: now.Add(7 * 24 * time.Hour), name: "dn-1", role: "datanode", hosts: []string{"10.0.0.1", "dn1.example"}}
	v := r.encode()
	got, err := decode(v)
	if err != nil || got.how != r.how || !got.issued.Equal(r.issued) || !got.notAfter.Equal(r.notAfter) || !got.revoked.IsZero() ||
		got.name != r.name || got.role != r.role || !slices.Equal(got.hosts, r.hosts) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
	}
	bad := map[string][]byte{"short": v[:10], "truncated": v[:len(v)-1], "extended": append(slices.Clone(v), 0)}
	flipped := slices.Clone(v)
	flipped[12] ^= 1
	bad["flipped"] = flipped
	for _, how := range []uint8{0, 9} {
		x := record{how: how}.encode()
		bad["how"] = x
	}
	for name, b := range bad {
		if _, err := decode(b); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestLimiter: a full bucket of n takes n at once, then one more only
// after 1/rate.
func TestLimiter(t *testing.T) {
	l := NewLimiter(10, 10)
	now := time.Unix(0, 0)
	for i := range 10 {
		if !l.Allow(now) {
			t.Fatalf("take %d of a full bucket refused", i)
		}
	}
	if l.Allow(now) {
		t.Fatal("an empty bucket gave a token")
	}
	if !l.Allow(now.Add(100 * time.Millisecond)) {
		t.Fatal("no token 1/rate later")
	}
	if !IsSerial("1f3a") || IsSerial("dn-1") || IsSerial("") {
		t.Fatal("IsSerial")
	}
}
