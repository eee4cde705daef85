package lockmeta

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
)

var (
	now    = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	past   = now.Add(-time.Hour)
	future = now.Add(24 * time.Hour)
)

// TestCheckRemove is the removal rule over mode × date × legal hold ×
// bypass asked × bypass permitted.
func TestCheckRemove(t *testing.T) {
	for _, mode := range []string{"", Governance, Compliance} {
		for _, until := range []time.Time{{}, past, future} {
			for _, hold := range []bool{false, true} {
				for _, asked := range []bool{false, true} {
					for _, permitted := range []bool{false, true} {
						if mode == "" && !until.IsZero() || mode != "" && until.IsZero() {
							continue
						}
						l := Lock{Mode: mode, Until: until, Hold: hold}
						retained := mode != "" && until.Equal(future)
						want := !hold && (!retained || mode == Governance && asked && permitted)
						err := CheckRemove(l, now, Override{Requested: asked, Permitted: permitted})
						name := fmt.Sprintf("%+v asked=%v permitted=%v", l, asked, permitted)
						if (err == nil) != want {
							t.Errorf("%s: %v, want allowed %v", name, err, want)
						}
						if err != nil && !errors.Is(err, metaapi.ErrForbidden) {
							t.Errorf("%s: %v, want forbidden", name, err)
						}
						// The same through the stored headers.
						if err2 := CheckRemoveMeta(l.Into(nil), now, Override{Requested: asked, Permitted: permitted}); (err2 == nil) != want {
							t.Errorf("%s through headers: %v, want allowed %v", name, err2, want)
						}
					}
				}
			}
		}
	}
	bad := &metaapi.ObjectMeta{Headers: map[string]string{ModeHeader: "COMPLIANCE", UntilHeader: "soon"}}
	if err := CheckRemoveMeta(bad, now, Override{Requested: true, Permitted: true}); err == nil {
		t.Error("an unreadable lock let a version go")
	}
}

// TestCheckRetention is the retention-change rule: extension free,
// anything weaker only on GOVERNANCE with a permitted bypass.
func TestCheckRetention(t *testing.T) {
	later := future.Add(time.Hour)
	earlier := future.Add(-time.Hour)
	for _, c := range []struct {
		old, next                   Lock
		asked, permitted, wantAllow bool
	}{
		{Lock{}, Lock{Mode: Compliance, Until: future}, false, false, true},
		{Lock{Mode: Compliance, Until: past}, Lock{}, false, false, true}, // expired
		{Lock{Mode: Compliance, Until: future}, Lock{Mode: Compliance, Until: later}, false, false, true},
		{Lock{Mode: Compliance, Until: future}, Lock{Mode: Compliance, Until: future}, false, false, true},
		{Lock{Mode: Compliance, Until: future}, Lock{Mode: Compliance, Until: earlier}, true, true, false},
		{Lock{Mode: Compliance, Until: future}, Lock{Mode: Governance, Until: later}, true, true, false},
		{Lock{Mode: Compliance, Until: future}, Lock{}, true, true, false},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Governance, Until: later}, false, false, true},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Compliance, Until: later}, false, false, false},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Compliance, Until: later}, true, true, true},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Governance, Until: earlier}, false, true, false},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Governance, Until: earlier}, true, false, false},
		{Lock{Mode: Governance, Until: future}, Lock{Mode: Governance, Until: earlier}, true, true, true},
		{Lock{Mode: Governance, Until: future}, Lock{}, true, true, true},
		{Lock{Mode: Governance, Until: future}, Lock{}, false, false, false},
	} {
		err := CheckRetention(c.old, c.next, now, Override{Requested: c.asked, Permitted: c.permitted})
		if (err == nil) != c.wantAllow {
			t.Errorf("%+v → %+v (asked %v, permitted %v): %v, want allowed %v", c.old, c.next, c.asked, c.permitted, err, c.wantAllow)
		}
	}
}

// TestOnWrite: lock headers only where the bucket has lock, dates in the
// future, the default retention otherwise, counted from the write.
func TestOnWrite(t *testing.T) {
	on := Config{Enabled: true}
	def := Config{Enabled: true, Mode: Governance, Days: 3}
	req := func(h map[string]string) *metaapi.ObjectMeta { return &metaapi.ObjectMeta{ETag: "e", Headers: h} }
	for _, c := range []struct {
		name string
		c    Config
		om   *metaapi.ObjectMeta
		want Lock
		err  bool
	}{
		{"nothing asked, no lock", Config{}, req(nil), Lock{}, false},
		{"nothing asked, native key", def, nil, Lock{Mode: Governance, Until: now.AddDate(0, 0, 3)}, false},
		{"mode asked without lock", Config{}, req(map[string]string{ModeHeader: Governance, UntilHeader: future.Format(time.RFC3339)}), Lock{}, true},
		{"hold asked without lock", Config{}, req(map[string]string{HoldHeader: "ON"}), Lock{}, true},
		{"mode without date", on, req(map[string]string{ModeHeader: Governance}), Lock{}, true},
		{"date in the past", on, req(map[string]string{ModeHeader: Compliance, UntilHeader: past.Format(time.RFC3339)}), Lock{}, true},
		{"bad mode", on, req(map[string]string{ModeHeader: "FOREVER", UntilHeader: future.Format(time.RFC3339)}), Lock{}, true},
		{"asked", on, req(map[string]string{ModeHeader: Compliance, UntilHeader: future.Format(time.RFC3339)}), Lock{Mode: Compliance, Until: future}, false},
		{"asked over a default", def, req(map[string]string{ModeHeader: Compliance, UntilHeader: future.Format(time.RFC3339)}), Lock{Mode: Compliance, Until: future}, false},
		{"hold and the default", def, req(map[string]string{HoldHeader: "ON"}), Lock{Mode: Governance, Until: now.AddDate(0, 0, 3), Hold: true, HoldSet: true}, false},
		{"years", Config{Enabled: true, Mode: Compliance, Years: 1}, req(nil), Lock{Mode: Compliance, Until: now.AddDate(1, 0, 0)}, false},
	} {
		om, err := OnWrite(c.c, c.om, now)
		if (err != nil) != c.err {
			t.Errorf("%s: %v, want error %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		got, err := Of(om)
		if err != nil || got != c.want {
			t.Errorf("%s: lock %+v (%v), want %+v", c.name, got, err, c.want)
		}
		if c.om != nil && om.ETag != c.om.ETag {
			t.Errorf("%s: metadata lost", c.name)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		c  Config
		ok bool
	}{
		{Config{Enabled: true}, true},
		{Config{}, false},
		{Config{Enabled: true, Mode: Governance, Days: 1}, true},
		{Config{Enabled: true, Mode: Compliance, Years: MaxYears}, true},
		{Config{Enabled: true, Mode: Governance}, false},
		{Config{Enabled: true, Mode: Governance, Days: 1, Years: 1}, false},
		{Config{Enabled: true, Mode: Governance, Days: MaxDays + 1}, false},
		{Config{Enabled: true, Mode: "X", Days: 1}, false},
		{Config{Enabled: true, Days: 1}, false},
	} {
		if err := c.c.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.c, err, c.ok)
		}
	}
}
