// Package lockmeta is the rule book of S3 object lock (issue 35 item 2)
// in the meta service: a bucket's lock configuration, a version's lock
// (its retention and legal hold) and the decisions on them — may this
// version be removed, may its retention change, what lock does a new
// version get. Package namespace (objlock.go) keeps the state and calls
// these functions inside its mutations; package versions serves the
// routes (metaapi/versionapi's objlock.go).
//
// Storage: a version's lock lives in its key record, among its stored
// headers (metaapi.ObjectMeta.Headers) under the S3 header names
// ModeHeader, UntilHeader and HoldHeader, so that it moves with the
// version from its 'K' record to its 'V' record, is raft-replicated with
// it, and reads of the version carry it. A bucket's configuration is its
// configuration document ConfName ('S' record, state/s3conf.go), JSON,
// deleted with the bucket, never through the generic document routes.
//
// Invariants (enforced by namespace with these functions):
//
//   - A bucket's lock, once enabled, is never disabled, and its
//     versioning stays Enabled (not Suspended).
//   - A version whose legal hold is on, or whose retention date is in
//     the future, is never removed and its blocks never freed: CheckRemove
//     is called wherever a version's blocks are given to the GC (the
//     namespace's forget). Defence in depth: the datanodes holding its
//     blocks keep a hold on each and refuse their deletion themselves
//     (package holdmeta writes and delivers the holds). A GOVERNANCE retention gives way only to a
//     request that asks (x-amz-bypass-governance-retention) and is
//     permitted (admin on the bucket: owner, admin grant, admin
//     certificate, the gateway's root user); COMPLIANCE to no one.
//   - A retention may be extended (same mode, later date) by anyone
//     allowed to set it; shortened, removed or moved from GOVERNANCE to
//     another mode only with the override; a COMPLIANCE one never, until
//     it expires.
//   - Lock headers in a new version's metadata are taken only in a bucket
//     with lock enabled (refused elsewhere, so no write can make a version
//     undeletable in a bucket without lock); a version written without
//     them gets the bucket's default retention, counted from its write.
//
// Concurrency: functions and values only; no state.
package lockmeta

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/versionapi"
)

// The stored headers of a version's lock (S3's request and response
// header names, canonical form).
const (
	ModeHeader  = versionapi.ModeHeader
	UntilHeader = versionapi.UntilHeader
	HoldHeader  = versionapi.HoldHeader
)

// Retention modes.
const (
	Governance = versionapi.Governance
	Compliance = versionapi.Compliance
)

// ConfName is the bucket configuration document that holds Config.
const ConfName = "objlock"

// Bounds of a default retention (S3's).
const (
	MaxDays  = 36500
	MaxYears = 100
)

// Config is a bucket's object lock configuration: Enabled (for good once
// set) and an optional default retention (Mode with Days or Years).
type Config struct {
	Enabled bool   `json:"enabled"`
	Mode    string `json:"mode,omitempty"`
	Days    int    `json:"days,omitempty"`
	Years   int    `json:"years,omitempty"`
}

// Validate checks a configuration as S3 does.
func (c Config) Validate() error {
	if !c.Enabled {
		return fmt.Errorf("%w: object lock configuration must be Enabled", metaapi.ErrInvalid)
	}
	if c.Mode == "" {
		if c.Days != 0 || c.Years != 0 {
			return fmt.Errorf("%w: a default retention period without a mode", metaapi.ErrInvalid)
		}
		return nil
	}
	if err := validMode(c.Mode); err != nil {
		return err
	}
	switch {
	case (c.Days == 0) == (c.Years == 0):
		return fmt.Errorf("%w: a default retention needs Days or Years (one of them)", metaapi.ErrInvalid)
	case c.Days < 0 || c.Days > MaxDays:
		return fmt.Errorf("%w: default retention of %d days: want 1..%d", metaapi.ErrInvalid, c.Days, MaxDays)
	case c.Years < 0 || c.Years > MaxYears:
		return fmt.Errorf("%w: default retention of %d years: want 1..%d", metaapi.ErrInvalid, c.Years, MaxYears)
	}
	return nil
}

// Default is the lock a version written at now gets from c (none when c
// has no default retention).
func (c Config) Default(now time.Time) Lock {
	if c.Mode == "" {
		return Lock{}
	}
	return Lock{Mode: c.Mode, Until: now.AddDate(c.Years, 0, c.Days).UTC()}
}

// ParseConfig reads a stored configuration document.
func ParseConfig(doc []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(doc, &c); err != nil {
		return c, fmt.Errorf("object lock configuration: %w", err)
	}
	return c, nil
}

func validMode(m string) error {
	if m != Governance && m != Compliance {
		return fmt.Errorf("%w: retention mode %q: want %s or %s", metaapi.ErrInvalid, m, Governance, Compliance)
	}
	return nil
}

// Lock is a version's lock: its retention (Mode "" none) and legal hold.
type Lock struct {
	Mode  string
	Until time.Time
	Hold  bool
	// HoldSet: a legal hold was set on the version (on or off), as S3
	// tells from one never set.
	HoldSet bool
}

// ValidRetention checks a retention asked for at now: a mode with a date
// in the future, or neither (no retention).
func (l Lock) ValidRetention(now time.Time) error {
	if l.Mode == "" {
		if !l.Until.IsZero() {
			return fmt.Errorf("%w: a retain-until date without a mode", metaapi.ErrInvalid)
		}
		return nil
	}
	if err := validMode(l.Mode); err != nil {
		return err
	}
	if !l.Until.After(now) {
		return fmt.Errorf("%w: retain-until date %s is not in the future", metaapi.ErrInvalid, l.Until.Format(time.RFC3339))
	}
	return nil
}

// Retained says the retention holds at now.
func (l Lock) Retained(now time.Time) bool { return l.Mode != "" && l.Until.After(now) }

// Locked says the version may not be removed at now (without override).
func (l Lock) Locked(now time.Time) bool { return l.Hold || l.Retained(now) }

// Of reads a version's lock from its stored headers (om nil: none).
func Of(om *metaapi.ObjectMeta) (Lock, error) {
	var l Lock
	if om == nil {
		return l, nil
	}
	mode, until, hold := om.Headers[ModeHeader], om.Headers[UntilHeader], om.Headers[HoldHeader]
	if (mode == "") != (until == "") {
		return l, fmt.Errorf("%w: object lock mode and retain-until date go together", metaapi.ErrInvalid)
	}
	if mode != "" {
		if err := validMode(mode); err != nil {
			return l, err
		}
		t, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return l, fmt.Errorf("%w: retain-until date %q: %v", metaapi.ErrInvalid, until, err)
		}
		l.Mode, l.Until = mode, t.UTC()
	}
	l.HoldSet = hold != ""
	switch strings.ToUpper(hold) {
	case "", "OFF":
	case "ON":
		l.Hold = true
	default:
		return l, fmt.Errorf("%w: legal hold %q: want ON or OFF", metaapi.ErrInvalid, hold)
	}
	return l, nil
}

// Into returns a copy of om (nil: a new one) with l as its lock headers.
func (l Lock) Into(om *metaapi.ObjectMeta) *metaapi.ObjectMeta {
	var c metaapi.ObjectMeta
	if om != nil {
		c = *om
	}
	c.Headers = maps.Clone(c.Headers)
	if c.Headers == nil {
		c.Headers = map[string]string{}
	}
	delete(c.Headers, ModeHeader)
	delete(c.Headers, UntilHeader)
	delete(c.Headers, HoldHeader)
	if l.Mode != "" {
		c.Headers[ModeHeader] = l.Mode
		c.Headers[UntilHeader] = l.Until.UTC().Format(time.RFC3339Nano)
	}
	if l.Hold {
		c.Headers[HoldHeader] = "ON"
	} else if l.HoldSet {
		c.Headers[HoldHeader] = "OFF"
	}
	return &c
}

// Override is a request's standing against a GOVERNANCE retention:
// whether it asked to bypass it (x-amz-bypass-governance-retention: true)
// and whether its caller is permitted to (admin on the bucket).
type Override struct {
	Requested, Permitted bool
}

func (o Override) bypasses() bool { return o.Requested && o.Permitted }

func locked(format string, a ...any) error {
	return fmt.Errorf("%w: object locked: "+format, append([]any{metaapi.ErrForbidden}, a...)...)
}

// CheckRemove decides whether a version with lock l may be removed (its
// blocks freed) at now: a legal hold refuses always; a retention in
// force refuses unless it is GOVERNANCE and o bypasses it.
func CheckRemove(l Lock, now time.Time, o Override) error {
	switch {
	case l.Hold:
		return locked("a legal hold is on")
	case !l.Retained(now):
		return nil
	case l.Mode == Governance && o.bypasses():
		return nil
	case l.Mode == Governance && o.Requested:
		return locked("GOVERNANCE retention until %s: no permission to bypass it", l.Until.Format(time.RFC3339))
	}
	return locked("%s retention until %s", l.Mode, l.Until.Format(time.RFC3339))
}

// CheckRemoveMeta is CheckRemove on a version's stored metadata; a lock
// that does not parse counts as locked (fail closed).
func CheckRemoveMeta(om *metaapi.ObjectMeta, now time.Time, o Override) error {
	l, err := Of(om)
	if err != nil {
		return locked("unreadable lock: %v", err)
	}
	return CheckRemove(l, now, o)
}

// CheckRetention decides whether a version's retention may go from old to
// next (next.Mode "": removed) at now: freely when old is not in force or
// next extends it (same mode, no earlier date); else only a GOVERNANCE
// one, with an override.
func CheckRetention(old, next Lock, now time.Time, o Override) error {
	switch {
	case !old.Retained(now):
		return nil
	case next.Mode == old.Mode && !next.Until.Before(old.Until):
		return nil
	case old.Mode == Governance && o.bypasses():
		return nil
	case old.Mode == Governance && o.Requested:
		return locked("shortening a GOVERNANCE retention needs the permission to bypass it")
	}
	return locked("%s retention until %s may only be extended", old.Mode, old.Until.Format(time.RFC3339))
}

// OnWrite is the lock of a new version: the lock headers its metadata
// carries (taken only when the bucket's lock is enabled: c), else c's
// default retention. It returns om, or a copy with the lock it gets.
func OnWrite(c Config, om *metaapi.ObjectMeta, now time.Time) (*metaapi.ObjectMeta, error) {
	l, err := Of(om)
	if err != nil {
		return nil, err
	}
	asked := om != nil && (om.Headers[ModeHeader] != "" || om.Headers[HoldHeader] != "")
	switch {
	case asked && !c.Enabled:
		return nil, fmt.Errorf("%w: %s", metaapi.ErrInvalid, versionapi.NoLockConfigText)
	case l.Mode != "" && !l.Until.After(now):
		return nil, fmt.Errorf("%w: retain-until date %s is not in the future", metaapi.ErrInvalid, l.Until.Format(time.RFC3339))
	case l.Mode == "" && c.Mode != "":
		d := c.Default(now)
		l.Mode, l.Until = d.Mode, d.Until
	case !asked:
		return om, nil
	}
	return l.Into(om), nil
}
