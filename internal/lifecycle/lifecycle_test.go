package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func rules(body ...string) []byte {
	return []byte(`<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` + strings.Join(body, "") + `</LifecycleConfiguration>`)
}

const exp1 = `<Expiration><Days>1</Days></Expiration>`

// TestParse: S3's checks of a configuration, a case per refusal, and
// the documents it takes.
func TestParse(t *testing.T) {
	many := make([]string, MaxRules+1)
	for i := range many {
		many[i] = fmt.Sprintf(`<Rule><ID>r%d</ID><Filter/><Status>Enabled</Status>%s</Rule>`, i, exp1)
	}
	for _, c := range []struct {
		name, code string // code "": accepted
		doc        []byte
	}{
		{"prefix expiration", "", rules(`<Rule><ID>a</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"legacy prefix", "", rules(`<Rule><ID>a</ID><Prefix>logs/</Prefix><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"no filter", "", rules(`<Rule><ID>a</ID><Status>Disabled</Status>` + exp1 + `</Rule>`)},
		{"and", "", rules(`<Rule><ID>a</ID><Filter><And><Prefix>p</Prefix><Tag><Key>k</Key><Value>v</Value></Tag><Tag><Key>j</Key><Value>w</Value></Tag></And></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"all actions", "", rules(`<Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration><NoncurrentVersionExpiration><NoncurrentDays>3</NoncurrentDays><NewerNoncurrentVersions>5</NewerNoncurrentVersions></NoncurrentVersionExpiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`)},
		{"1000 rules", "", rules(many[:MaxRules]...)},
		{"1001 rules", "InvalidArgument", rules(many...)},
		{"no rule", "MalformedXML", rules()},
		{"not XML", "MalformedXML", []byte("<Lifecycle")},
		{"status", "MalformedXML", rules(`<Rule><ID>a</ID><Status>On</Status>` + exp1 + `</Rule>`)},
		{"duplicate ID", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status>`+exp1+`</Rule>`, `<Rule><ID>a</ID><Status>Enabled</Status>`+exp1+`</Rule>`)},
		{"long ID", "InvalidArgument", rules(`<Rule><ID>` + strings.Repeat("i", 256) + `</ID><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"no action", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status></Rule>`)},
		{"days 0", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Expiration><Days>0</Days></Expiration></Rule>`)},
		{"days and marker", "MalformedXML", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`)},
		{"empty expiration", "MalformedXML", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Expiration></Expiration></Rule>`)},
		{"date not midnight", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration></Rule>`)},
		{"date not a date", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Expiration><Date>soon</Date></Expiration></Rule>`)},
		{"noncurrent days missing", "MalformedXML", rules(`<Rule><ID>a</ID><Status>Enabled</Status><NoncurrentVersionExpiration><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`)},
		{"newer 101", "InvalidArgument", rules(`<Rule><ID>a</ID><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`)},
		{"abort with tag", "InvalidArgument", rules(`<Rule><ID>a</ID><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`)},
		{"marker with tag", "InvalidArgument", rules(`<Rule><ID>a</ID><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`)},
		{"filter and prefix", "MalformedXML", rules(`<Rule><ID>a</ID><Prefix>x</Prefix><Filter><Prefix>y</Prefix></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"two filter elements", "MalformedXML", rules(`<Rule><ID>a</ID><Filter><Prefix>y</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"duplicate tag", "InvalidArgument", rules(`<Rule><ID>a</ID><Filter><And><Tag><Key>k</Key><Value>v</Value></Tag><Tag><Key>k</Key><Value>w</Value></Tag></And></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
		{"transition", "NotImplemented", rules(`<Rule><ID>a</ID><Status>Enabled</Status><Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition></Rule>`)},
		{"sizes reversed", "InvalidArgument", rules(`<Rule><ID>a</ID><Filter><And><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan><ObjectSizeLessThan>5</ObjectSizeLessThan></And></Filter><Status>Enabled</Status>` + exp1 + `</Rule>`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf, err := Parse(c.doc)
			var le *Error
			switch {
			case c.code == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.code != "" && (!errors.As(err, &le) || le.Code != c.code):
				t.Fatalf("got %v, want %s", err, c.code)
			case c.code == "":
				// the document kept parses to the same rules, IDs included
				again, err := Parse(conf.XML())
				if err != nil || len(again.Rules) != len(conf.Rules) || again.Rules[0].ID != conf.Rules[0].ID {
					t.Fatalf("the stored document: %v", err)
				}
			}
		})
	}
	conf, err := Parse(rules(`<Rule><Status>Enabled</Status>` + exp1 + `</Rule>`))
	if err != nil || conf.Rules[0].ID == "" {
		t.Fatalf("a rule without an ID gets one: %v", err)
	}
}

// TestPlan: what the rules decide for one key's versions, table-driven.
func TestPlan(t *testing.T) {
	day := time.Hour
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d float64) time.Time { return t0.Add(time.Duration(d * float64(day))) }
	v := func(id string, created float64, tags ...string) ObjectVersion {
		o := ObjectVersion{ID: id, Created: at(created), Size: 10}
		for i := 0; i+1 < len(tags); i += 2 {
			if o.Tags == nil {
				o.Tags = map[string]string{}
			}
			o.Tags[tags[i]] = tags[i+1]
		}
		return o
	}
	marker := func(id string, created float64) ObjectVersion {
		return ObjectVersion{ID: id, Created: at(created), Marker: true}
	}
	cur := func(o ObjectVersion) *ObjectVersion { return &o }
	rule := func(filter, actions string) string {
		return `<Rule><Filter>` + filter + `</Filter><Status>Enabled</Status>` + actions + `</Rule>`
	}
	days := func(n int) string { return fmt.Sprintf(`<Expiration><Days>%d</Days></Expiration>`, n) }
	nc := func(n, newer int) string {
		s := fmt.Sprintf(`<NoncurrentVersionExpiration><NoncurrentDays>%d</NoncurrentDays>`, n)
		if newer > 0 {
			s += fmt.Sprintf(`<NewerNoncurrentVersions>%d</NewerNoncurrentVersions>`, newer)
		}
		return s + `</NoncurrentVersionExpiration>`
	}
	const eodm = `<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>`
	for _, c := range []struct {
		name   string
		rules  []string
		kv     KeyVersions
		now    float64
		expire bool
		remove []string
		marker string
	}{
		{"due", []string{rule("", days(2))}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 2, true, nil, ""},
		{"not yet due", []string{rule("", days(2))}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 1.9, false, nil, ""},
		{"other prefix", []string{rule("<Prefix>logs/</Prefix>", days(1))}, KeyVersions{Key: "data/a", Current: cur(v("null", 0))}, 5, false, nil, ""},
		{"prefix", []string{rule("<Prefix>logs/</Prefix>", days(1))}, KeyVersions{Key: "logs/a", Current: cur(v("null", 0))}, 5, true, nil, ""},
		{"tag matches", []string{rule("<Tag><Key>t</Key><Value>x</Value></Tag>", days(1))}, KeyVersions{Key: "a", Current: cur(v("null", 0, "t", "x"))}, 5, true, nil, ""},
		{"tag differs", []string{rule("<Tag><Key>t</Key><Value>x</Value></Tag>", days(1))}, KeyVersions{Key: "a", Current: cur(v("null", 0, "t", "y"))}, 5, false, nil, ""},
		{"and: tags all", []string{rule("<And><Prefix>a</Prefix><Tag><Key>t</Key><Value>x</Value></Tag><Tag><Key>u</Key><Value>y</Value></Tag></And>", days(1))},
			KeyVersions{Key: "ab", Current: cur(v("null", 0, "t", "x"))}, 5, false, nil, ""},
		{"size", []string{rule("<ObjectSizeGreaterThan>5</ObjectSizeGreaterThan>", days(1))}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 5, true, nil, ""},
		{"size too small", []string{rule("<ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>", days(1))}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 5, false, nil, ""},
		{"disabled", []string{`<Rule><Status>Disabled</Status>` + days(1) + `</Rule>`}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 5, false, nil, ""},
		{"date", []string{rule("", `<Expiration><Date>2026-01-03T00:00:00Z</Date></Expiration>`)}, KeyVersions{Key: "a", Current: cur(v("null", 40))}, 48, true, nil, ""},
		{"before the date", []string{rule("", `<Expiration><Date>2026-01-03T00:00:00Z</Date></Expiration>`)}, KeyVersions{Key: "a", Current: cur(v("null", 0))}, 47, false, nil, ""},
		// noncurrent: days count from the successor's creation
		{"noncurrent", []string{rule("", nc(2, 0))}, KeyVersions{Key: "k", Current: cur(v("3", 10)), Older: []ObjectVersion{v("2", 5), v("1", 0)}}, 11.5, false, []string{"1"}, ""},
		{"noncurrent all", []string{rule("", nc(2, 0))}, KeyVersions{Key: "k", Current: cur(v("3", 10)), Older: []ObjectVersion{v("2", 5), v("1", 0)}}, 12, false, []string{"2", "1"}, ""},
		{"newer kept", []string{rule("", nc(1, 2))}, KeyVersions{Key: "k", Current: cur(v("5", 4)), Older: []ObjectVersion{v("4", 3), v("3", 2), v("2", 1), v("1", 0)}}, 50, false, []string{"2", "1"}, ""},
		{"behind a marker", []string{rule("", nc(1, 0))}, KeyVersions{Key: "k", Older: []ObjectVersion{marker("3", 10), v("2", 5), marker("1", 0)}}, 10.5, false, []string{"1"}, ""},
		{"marker alone", []string{rule("", eodm)}, KeyVersions{Key: "k", Older: []ObjectVersion{marker("3", 10)}}, 10, false, nil, "3"},
		{"marker not alone", []string{rule("", eodm)}, KeyVersions{Key: "k", Older: []ObjectVersion{marker("3", 10), v("2", 1)}}, 10, false, nil, ""},
		{"marker without the rule", []string{rule("", days(1))}, KeyVersions{Key: "k", Older: []ObjectVersion{marker("3", 10)}}, 99, false, nil, ""},
		{"tags skip markers", []string{rule("<Tag><Key>t</Key><Value>x</Value></Tag>", nc(1, 0))}, KeyVersions{Key: "k", Current: cur(v("3", 10)), Older: []ObjectVersion{marker("2", 5), v("1", 0, "t", "x")}}, 20, false, []string{"1"}, ""},
		{"current first, noncurrent next pass", []string{rule("", days(1)), rule("", nc(1, 0))}, KeyVersions{Key: "k", Current: cur(v("2", 5)), Older: []ObjectVersion{v("1", 0)}}, 20, true, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conf, err := Parse(rules(c.rules...))
			if err != nil {
				t.Fatal(err)
			}
			a := conf.Plan(c.kv, at(c.now), day)
			if a.ExpireCurrent != c.expire || !slices.Equal(a.Remove, c.remove) || a.RemoveMarker != c.marker {
				t.Fatalf("plan %+v; want expire %v remove %v marker %q", a, c.expire, c.remove, c.marker)
			}
			if a.ExpireCurrent && (a.CurrentID != c.kv.Current.ID || !a.CurrentCreated.Equal(c.kv.Current.Created)) {
				t.Fatalf("expiry names %s %v", a.CurrentID, a.CurrentCreated)
			}
		})
	}
}

// TestAbortAndDue: multipart aborts by prefix and age, and S3's rounding
// of a 24 h day to midnight UTC.
func TestAbortAndDue(t *testing.T) {
	conf, err := Parse(rules(`<Rule><Filter><Prefix>up/</Prefix></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		key  string
		now  time.Time
		want bool
	}{
		{"up/a", t0.Add(47 * time.Hour), false},
		{"up/a", t0.Add(48 * time.Hour), false}, // rounded up to midnight
		{"up/a", time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC), true},
		{"down/a", t0.Add(100 * time.Hour), false},
	} {
		if got := conf.AbortDue(c.key, t0, c.now, 24*time.Hour); got != c.want {
			t.Errorf("AbortDue(%s, %v) = %v", c.key, c.now, got)
		}
	}
	if got := Due(t0, 1, time.Second); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("a test day is not rounded: %v", got)
	}
}
