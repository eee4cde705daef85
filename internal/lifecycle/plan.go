package lifecycle

import (
	"strings"
	"time"
)

// ObjectVersion is one version of a key as the rules see it.
type ObjectVersion struct {
	ID      string // the version ID as S3 shows it ("null" for the null version)
	Marker  bool   // a delete marker
	Created time.Time
	Size    uint64
	Tags    map[string]string // nil: none
}

// KeyVersions is one key's versions: its current one (nil: none, the
// newest version is a delete marker or the key has no version) and its
// other versions, newest first (delete markers included).
type KeyVersions struct {
	Key     string
	Current *ObjectVersion
	Older   []ObjectVersion
}

// Action is what Plan decided for one key. The applier checks, under its
// lock, that each version named is still as planned (ID, and for the
// current version its creation time).
type Action struct {
	Key string
	// ExpireCurrent expires the current version CurrentID (created
	// CurrentCreated): deleted in an unversioned bucket, hidden behind a
	// new delete marker in a versioned one.
	ExpireCurrent  bool
	CurrentID      string
	CurrentCreated time.Time
	// Remove are noncurrent versions to remove for good.
	Remove []string
	// RemoveMarker is the ID of an expired object delete marker (the
	// key's only version) to remove.
	RemoveMarker string
}

// Empty says whether the action does nothing.
func (a Action) Empty() bool { return !a.ExpireCurrent && len(a.Remove) == 0 && a.RemoveMarker == "" }

// matches says whether the rule's filter takes an object (key, tags, size).
func (r *Rule) matches(key string, v *ObjectVersion) bool {
	if r.Status != StatusEnabled || !strings.HasPrefix(key, r.prefix) {
		return false
	}
	if len(r.tags) > 0 && (v == nil || v.Marker) {
		return false
	}
	if v != nil {
		for _, t := range r.tags {
			if got, ok := v.Tags[t.Key]; !ok || got != t.Value {
				return false
			}
		}
		if r.sizeGT >= 0 && !(v.Size > uint64(r.sizeGT)) {
			return false
		}
		if r.sizeLT >= 0 && !(v.Size < uint64(r.sizeLT)) {
			return false
		}
	}
	return true
}

// Due is when something created at t is days days old: t + days × day,
// rounded up to the next midnight UTC when day is S3's 24 h.
func Due(t time.Time, days int, day time.Duration) time.Time {
	due := t.Add(time.Duration(days) * day)
	if day == 24*time.Hour {
		if m := due.UTC().Truncate(24 * time.Hour); !m.Equal(due) {
			due = m.Add(24 * time.Hour)
		}
	}
	return due
}

// Plan decides what the rules do to one key's versions at now.
func (c *Configuration) Plan(kv KeyVersions, now time.Time, day time.Duration) Action {
	a := Action{Key: kv.Key}
	if cur := kv.Current; cur != nil {
		for _, r := range c.Rules {
			if (r.expDays == 0 && !r.hasDate) || !r.matches(kv.Key, cur) {
				continue
			}
			if r.hasDate && !now.Before(r.date) || r.expDays > 0 && !now.Before(Due(cur.Created, r.expDays, day)) {
				a.ExpireCurrent, a.CurrentID, a.CurrentCreated = true, cur.ID, cur.Created
				return a // the rest waits for the next pass (one change of a key at a time)
			}
		}
	}
	noncurrent, successor := kv.Older, kv.Current
	if kv.Current == nil && len(kv.Older) > 0 {
		if len(kv.Older) == 1 && kv.Older[0].Marker && c.markerExpires(kv.Key) {
			a.RemoveMarker = kv.Older[0].ID
			return a
		}
		noncurrent, successor = kv.Older[1:], &kv.Older[0]
	}
	for i := range noncurrent {
		v := &noncurrent[i]
		since := successor.Created
		successor = v
		for _, r := range c.Rules {
			if r.ncDays == 0 || i < r.ncNewer || !r.matches(kv.Key, v) {
				continue
			}
			if !now.Before(Due(since, r.ncDays, day)) {
				a.Remove = append(a.Remove, v.ID)
				break
			}
		}
	}
	return a
}

// markerExpires says whether a rule removes the key's expired object
// delete marker.
func (c *Configuration) markerExpires(key string) bool {
	for _, r := range c.Rules {
		if r.expMark && r.matches(key, nil) {
			return true
		}
	}
	return false
}

// AbortDue says whether a multipart upload of key initiated at t is to
// be aborted at now.
func (c *Configuration) AbortDue(key string, initiated, now time.Time, day time.Duration) bool {
	for _, r := range c.Rules {
		if r.abortDay > 0 && r.matches(key, nil) && !now.Before(Due(initiated, r.abortDay, day)) {
			return true
		}
	}
	return false
}
