package lifecycle

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Limits S3 sets.
const (
	MaxRules          = 1000
	MaxIDBytes        = 255
	MaxTagKeyBytes    = 128
	MaxTagValueBytes  = 256
	MaxNewerVersions  = 100
	MaxDocumentBytes  = 1 << 20
	xmlns             = "http://s3.amazonaws.com/doc/2006-03-01/"
	StatusEnabled     = "Enabled"
	StatusDisabled    = "Disabled"
	codeMalformed     = "MalformedXML"
	codeInvalid       = "InvalidArgument"
	codeNotImplemened = "NotImplemented"
)

// Error is a refused configuration, with S3's error code.
type Error struct {
	Code string // MalformedXML, InvalidArgument, NotImplemented
	Msg  string
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

func malformed(format string, a ...any) error {
	return &Error{Code: codeMalformed, Msg: fmt.Sprintf(format, a...)}
}

func invalid(format string, a ...any) error {
	return &Error{Code: codeInvalid, Msg: fmt.Sprintf(format, a...)}
}

// Tag is an object tag a filter asks for.
type Tag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

// And is a filter's conjunction.
type And struct {
	Prefix                *string `xml:"Prefix"`
	Tags                  []Tag   `xml:"Tag"`
	ObjectSizeGreaterThan *int64  `xml:"ObjectSizeGreaterThan"`
	ObjectSizeLessThan    *int64  `xml:"ObjectSizeLessThan"`
}

// Filter selects the objects a rule applies to (at most one element).
type Filter struct {
	Prefix                *string `xml:"Prefix"`
	Tag                   *Tag    `xml:"Tag"`
	And                   *And    `xml:"And"`
	ObjectSizeGreaterThan *int64  `xml:"ObjectSizeGreaterThan"`
	ObjectSizeLessThan    *int64  `xml:"ObjectSizeLessThan"`
}

// Expiration expires current versions (Days or Date) or removes expired
// object delete markers.
type Expiration struct {
	Days                      *int    `xml:"Days"`
	Date                      *string `xml:"Date"`
	ExpiredObjectDeleteMarker *bool   `xml:"ExpiredObjectDeleteMarker"`
}

// NoncurrentVersionExpiration removes noncurrent versions NoncurrentDays
// after they became noncurrent, keeping the NewerNoncurrentVersions newest.
type NoncurrentVersionExpiration struct {
	NoncurrentDays          *int `xml:"NoncurrentDays"`
	NewerNoncurrentVersions *int `xml:"NewerNoncurrentVersions,omitempty"`
}

// AbortIncompleteMultipartUpload aborts uploads DaysAfterInitiation old.
type AbortIncompleteMultipartUpload struct {
	DaysAfterInitiation *int `xml:"DaysAfterInitiation"`
}

// Rule is one lifecycle rule.
type Rule struct {
	ID                             string                          `xml:"ID,omitempty"`
	Prefix                         *string                         `xml:"Prefix"` // the legacy form of Filter.Prefix
	Filter                         *Filter                         `xml:"Filter"`
	Status                         string                          `xml:"Status"`
	Expiration                     *Expiration                     `xml:"Expiration"`
	NoncurrentVersionExpiration    *NoncurrentVersionExpiration    `xml:"NoncurrentVersionExpiration"`
	AbortIncompleteMultipartUpload *AbortIncompleteMultipartUpload `xml:"AbortIncompleteMultipartUpload"`
	Transitions                    []struct{}                      `xml:"Transition"`
	NoncurrentVersionTransitions   []struct{}                      `xml:"NoncurrentVersionTransition"`

	// Parsed: the filter's conditions and Date.
	prefix   string
	tags     []Tag
	sizeGT   int64 // -1: none
	sizeLT   int64 // -1: none
	date     time.Time
	hasDate  bool
	expMark  bool
	expDays  int
	ncDays   int
	ncNewer  int
	abortDay int
}

// Configuration is a bucket's lifecycle configuration.
type Configuration struct {
	XMLName xml.Name `xml:"LifecycleConfiguration"`
	Rules   []*Rule  `xml:"Rule"`
}

// Parse reads and checks a LifecycleConfiguration document as S3 does.
// Rules without an ID get a random one (as S3 gives them).
func Parse(doc []byte) (*Configuration, error) {
	if len(doc) > MaxDocumentBytes {
		return nil, malformed("the lifecycle configuration is larger than %d bytes", MaxDocumentBytes)
	}
	var c Configuration
	dec := xml.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&c); err != nil {
		return nil, malformed("the XML you provided was not well-formed or did not validate against our published schema: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, malformed("data after the LifecycleConfiguration element")
	}
	if len(c.Rules) == 0 {
		return nil, malformed("a lifecycle configuration needs at least one Rule")
	}
	if len(c.Rules) > MaxRules {
		return nil, invalid("a lifecycle configuration has at most %d rules; this one has %d", MaxRules, len(c.Rules))
	}
	ids := map[string]bool{}
	for i, r := range c.Rules {
		if r.ID == "" {
			b := make([]byte, 16)
			_, _ = rand.Read(b) // never fails (crypto/rand)
			r.ID = hex.EncodeToString(b)
		}
		if len(r.ID) > MaxIDBytes {
			return nil, invalid("rule %d: ID length should not exceed allowed limit of %d", i+1, MaxIDBytes)
		}
		if ids[r.ID] {
			return nil, invalid("rule ID must be unique; found the same ID (%q) for more than one rule", r.ID)
		}
		ids[r.ID] = true
		if err := r.check(); err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Msg = fmt.Sprintf("rule %q: %s", r.ID, e.Msg)
			}
			return nil, err
		}
	}
	return &c, nil
}

func positive(name string, v *int) (int, error) {
	if v == nil {
		return 0, malformed("%s is missing", name)
	}
	if *v <= 0 {
		return 0, invalid("'%s' must be a positive integer, not %d", name, *v)
	}
	return *v, nil
}

func checkTag(t Tag, seen map[string]bool) error {
	if t.Key == "" || len(t.Key) > MaxTagKeyBytes {
		return invalid("a tag key must be 1 to %d bytes (%q)", MaxTagKeyBytes, t.Key)
	}
	if len(t.Value) > MaxTagValueBytes {
		return invalid("a tag value must be at most %d bytes (tag %q)", MaxTagValueBytes, t.Key)
	}
	if seen[t.Key] {
		return invalid("duplicate tag key %q in a filter", t.Key)
	}
	seen[t.Key] = true
	return nil
}

func (r *Rule) check() error {
	switch r.Status {
	case StatusEnabled, StatusDisabled:
	default:
		return malformed("Status must be Enabled or Disabled, not %q", r.Status)
	}
	if len(r.Transitions) > 0 || len(r.NoncurrentVersionTransitions) > 0 {
		return &Error{Code: codeNotImplemened, Msg: "transitions are not implemented: Spindle has one storage class"}
	}
	r.sizeGT, r.sizeLT = -1, -1
	if err := r.checkFilter(); err != nil {
		return err
	}
	if r.Expiration == nil && r.NoncurrentVersionExpiration == nil && r.AbortIncompleteMultipartUpload == nil {
		return invalid("at least one action needs to be specified in a rule (Expiration, NoncurrentVersionExpiration, AbortIncompleteMultipartUpload)")
	}
	if e := r.Expiration; e != nil {
		n := 0
		if e.Days != nil {
			n++
			d, err := positive("Days", e.Days)
			if err != nil {
				return err
			}
			r.expDays = d
		}
		if e.Date != nil {
			n++
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(*e.Date))
			if err != nil {
				if t, err = time.Parse("2006-01-02", strings.TrimSpace(*e.Date)); err != nil {
					return invalid("'Date' must be in ISO 8601 format (%q)", *e.Date)
				}
			}
			t = t.UTC()
			if !t.Equal(t.Truncate(24 * time.Hour)) {
				return invalid("'Date' must be at midnight GMT (%q)", *e.Date)
			}
			r.date, r.hasDate = t, true
		}
		if e.ExpiredObjectDeleteMarker != nil {
			n++
			r.expMark = *e.ExpiredObjectDeleteMarker
			if r.expMark && len(r.tags) > 0 {
				return invalid("ExpiredObjectDeleteMarker cannot be specified with tags")
			}
		}
		if n != 1 {
			return malformed("Expiration needs exactly one of Days, Date and ExpiredObjectDeleteMarker")
		}
	}
	if nc := r.NoncurrentVersionExpiration; nc != nil {
		d, err := positive("NoncurrentDays", nc.NoncurrentDays)
		if err != nil {
			return err
		}
		r.ncDays = d
		if nc.NewerNoncurrentVersions != nil {
			if v := *nc.NewerNoncurrentVersions; v < 1 || v > MaxNewerVersions {
				return invalid("NewerNoncurrentVersions must be 1 to %d, not %d", MaxNewerVersions, v)
			}
			r.ncNewer = *nc.NewerNoncurrentVersions
		}
	}
	if a := r.AbortIncompleteMultipartUpload; a != nil {
		if len(r.tags) > 0 {
			return invalid("AbortIncompleteMultipartUpload cannot be specified with tags")
		}
		d, err := positive("DaysAfterInitiation", a.DaysAfterInitiation)
		if err != nil {
			return err
		}
		r.abortDay = d
	}
	return nil
}

func (r *Rule) checkFilter() error {
	f := r.Filter
	if r.Prefix != nil {
		if f != nil {
			return malformed("a rule has Filter or Prefix, not both")
		}
		r.prefix = *r.Prefix
		return nil
	}
	if f == nil {
		return nil // applies to every object
	}
	n := 0
	seen := map[string]bool{}
	if f.Prefix != nil {
		n++
		r.prefix = *f.Prefix
	}
	if f.Tag != nil {
		n++
		if err := checkTag(*f.Tag, seen); err != nil {
			return err
		}
		r.tags = []Tag{*f.Tag}
	}
	if f.ObjectSizeGreaterThan != nil {
		n++
		r.sizeGT = *f.ObjectSizeGreaterThan
	}
	if f.ObjectSizeLessThan != nil {
		n++
		r.sizeLT = *f.ObjectSizeLessThan
	}
	if a := f.And; a != nil {
		n++
		if a.Prefix != nil {
			r.prefix = *a.Prefix
		}
		for _, t := range a.Tags {
			if err := checkTag(t, seen); err != nil {
				return err
			}
		}
		r.tags = a.Tags
		if a.ObjectSizeGreaterThan != nil {
			r.sizeGT = *a.ObjectSizeGreaterThan
		}
		if a.ObjectSizeLessThan != nil {
			r.sizeLT = *a.ObjectSizeLessThan
		}
	}
	if n > 1 {
		return malformed("Filter holds one of Prefix, Tag, ObjectSizeGreaterThan, ObjectSizeLessThan and And (several conditions go in And)")
	}
	if r.sizeGT < -1 || r.sizeLT == 0 || r.sizeLT < -1 {
		return invalid("object size filters must be positive")
	}
	if r.sizeGT >= 0 && r.sizeLT >= 0 && r.sizeLT <= r.sizeGT {
		return invalid("ObjectSizeLessThan (%d) must be greater than ObjectSizeGreaterThan (%d)", r.sizeLT, r.sizeGT)
	}
	return nil
}

// XML is the configuration's document as stored and answered (with the
// IDs Parse gave).
func (c *Configuration) XML() []byte {
	out := struct {
		XMLName xml.Name `xml:"LifecycleConfiguration"`
		NS      string   `xml:"xmlns,attr"`
		Rules   []*Rule  `xml:"Rule"`
	}{NS: xmlns, Rules: c.Rules}
	b, err := xml.Marshal(out)
	if err != nil {
		panic("lifecycle: marshal: " + err.Error()) // plain structs of strings and numbers
	}
	return append([]byte(xml.Header), b...)
}

// Enabled says whether any rule is enabled.
func (c *Configuration) Enabled() bool {
	for _, r := range c.Rules {
		if r.Status == StatusEnabled {
			return true
		}
	}
	return false
}

// HasUploadRules says whether an enabled rule aborts multipart uploads.
func (c *Configuration) HasUploadRules() bool {
	for _, r := range c.Rules {
		if r.Status == StatusEnabled && r.abortDay > 0 {
			return true
		}
	}
	return false
}
