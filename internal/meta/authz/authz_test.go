package authz

import (
	"errors"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/meta/state"
)

// Prefixes cover keys on '/' boundaries only.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		prefix, key string
		want        bool
	}{
		{"", "a", true}, {"", "", true},
		{"logs", "logs", true}, {"logs", "logs/a", true}, {"logs", "logs2", false}, {"logs", "logs../x", false},
		{"logs/", "logs/a", true}, {"logs/", "logs", false}, {"logs", "", false},
	} {
		if got := Covers(c.prefix, c.key); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.prefix, c.key, got, c.want)
		}
	}
}

// A grant record round-trips; a flipped bit, a wrong length or an unknown
// action is ErrCorrupt.
func TestRecord(t *testing.T) {
	r := record{actions: 5, created: time.UnixMilli(1767323045000)}
	v := r.encode()
	got, err := decode(v)
	if err != nil || got.actions != 5 || !got.created.Equal(r.created) {
		t.Fatalf("decode: %+v, %v", got, err)
	}
	for i := range v {
		b := append([]byte(nil), v...)
		b[i] ^= 1
		if _, err := decode(b); !errors.Is(err, state.ErrCorrupt) {
			t.Errorf("bit flipped in byte %d: %v", i, err)
		}
	}
	if _, err := decode(v[:len(v)-1]); !errors.Is(err, state.ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
	if _, err := decode(record{actions: 0x10}.encode()); !errors.Is(err, state.ErrCorrupt) {
		t.Errorf("unknown action bit: %v", err)
	}
	if b, p, prefix, err := parseKey(grantKey("photos", "user:bob", "public/x")); err != nil || b != "photos" || p != "user:bob" || prefix != "public/x" {
		t.Errorf("parseKey: %q %q %q %v", b, p, prefix, err)
	}
}
