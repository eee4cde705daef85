package ecmeta

import (
	"testing"

	"github.com/spindle-store/spindle/internal/ec"
)

// TestAgreed: a container is converted only to the coded policy every
// bucket with keys in it wants; a rep3 bucket, two policies or no bucket
// known keep it replicated.
func TestAgreed(t *testing.T) {
	spec := func(s string) ec.Spec {
		p, err := ec.ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	policies := map[string]ec.Spec{"a": spec("rs-3-2"), "b": spec("rs-3-2"), "c": spec("rs-6-3"), "d": spec("rep3"), "e": spec("rs-3-2,cell=64KiB")}
	of := func(b string) ec.Spec { return policies[b] }
	for _, tc := range []struct {
		buckets []string
		want    string
	}{
		{[]string{"a"}, "rs-3-2"}, {[]string{"a", "b"}, "rs-3-2"}, {[]string{"a", "c"}, ""}, {[]string{"a", "d"}, ""},
		{[]string{"d", "a"}, ""}, {[]string{"a", "e"}, ""}, {nil, ""}, {[]string{"d"}, ""},
	} {
		s, ok := agreed(tc.buckets, of)
		if got := map[bool]string{true: s.String()}[ok]; got != tc.want {
			t.Fatalf("%v: %q, want %q", tc.buckets, got, tc.want)
		}
	}
}
