package holdapi

import (
	"testing"
	"time"
)

// TestMerge: a hold only grows, but for the legal hold (the meta
// service's latest word) and a GOVERNANCE retention told with Bypass; a
// COMPLIANCE one never shrinks.
func TestMerge(t *testing.T) {
	gov := func(u int64) Hold { return Hold{Until: u} }
	comp := func(u int64) Hold { return Hold{Until: u, Compliance: true} }
	for _, c := range []struct {
		name            string
		cur, next, want Hold
	}{
		{"new", Hold{}, comp(10), comp(10)},
		{"extended", gov(10), gov(20), gov(20)},
		{"governance not shortened", gov(20), gov(10), gov(20)},
		{"governance shortened with bypass", gov(20), Hold{Until: 5, Bypass: true}, gov(5)},
		{"governance to compliance", gov(10), comp(20), comp(20)},
		{"compliance not shortened", comp(20), comp(10), comp(20)},
		{"compliance not shortened by bypass", comp(20), Hold{Until: 1, Bypass: true}, comp(20)},
		{"compliance not made governance", comp(20), gov(30), comp(30)},
		{"legal on", gov(10), Hold{Until: 10, Legal: true}, Hold{Until: 10, Legal: true}},
		{"legal released", Hold{Legal: true, Until: 10, Compliance: true}, Hold{}, comp(10)},
	} {
		if got := Merge(c.cur, c.next); got != c.want {
			t.Errorf("%s: Merge(%+v, %+v) = %+v, want %+v", c.name, c.cur, c.next, got, c.want)
		}
	}
	now := time.Unix(100, 0)
	if (Hold{Until: 100}).InForce(now) || !(Hold{Until: 101}).InForce(now) || !(Hold{Legal: true}).InForce(now) {
		t.Error("InForce: a retention holds while Until is after now; a legal hold always")
	}
	if UntilOf(time.Unix(100, 1)) != 101 || UntilOf(time.Unix(100, 0)) != 100 || UntilOf(time.Time{}) != 0 {
		t.Error("UntilOf rounds up to the second")
	}
}
