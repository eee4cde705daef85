package lcmeta

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// Prefix is the first byte of the lifecycle runner's record; 'L' 0x00
// holds its Status (a state.BucketConfRecord whose document is the
// Status in JSON).
const Prefix = 'L'

// StatusKey is the key of the Status record.
func StatusKey() []byte { return []byte{Prefix, 0} }

// Timing of the runner.
const (
	// PollEvery is how often Run looks whether a run is due.
	PollEvery = time.Second
	// CursorEvery bounds how long pages scanned without a change leave
	// the stored cursor behind.
	CursorEvery = 5 * time.Second
	// IdleRecheck is how long the runner waits, having found no bucket
	// with rules, before it reads the buckets' configurations again (at
	// most --lifecycle-interval).
	IdleRecheck = 10 * time.Second
	// MaxBucketsShown bounds the buckets a Status counts one by one (the
	// others are counted under OtherBuckets).
	MaxBucketsShown = 100
	// OtherBuckets names the buckets past MaxBucketsShown in a Status.
	OtherBuckets = "(other buckets)"
)

// errStint ends a step whose member's serving stint changed.
var errStint = errors.New("lifecycle: the serving stint changed")

// Manager runs the lifecycle rules on the leader.
type Manager struct {
	st  *state.State
	ns  namespace.Versions
	mp  *namespace.Multipart
	cfg lifecycle.Settings
	log *slog.Logger

	mu    sync.Mutex
	cache lifecycle.Status // the Status last read or written (metrics)

	pace time.Time // when the next expiration may be applied (Run's goroutine only)
	idle time.Time // no bucket had rules: not looked for again before (Run's goroutine only)
}

// New is the lifecycle runner over st's namespace.
func New(st *state.State, ns *namespace.Namespace, mp *namespace.Multipart) *Manager {
	cfg := st.Cfg.Lifecycle
	cfg.SetDefaults()
	return &Manager{st: st, ns: namespace.Versions{Namespace: ns}, mp: mp, cfg: cfg, log: st.Log.With("component", "lifecycle")}
}

// Run runs lifecycle until stop is closed, while serving() says the
// member serves (the leader).
func (m *Manager) Run(stop <-chan struct{}, serving func() bool) {
	t := time.NewTicker(min(PollEvery, m.cfg.Interval))
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !serving() {
			continue
		}
		err := m.step(stop, serving)
		if err != nil && !errors.Is(err, errStint) && err.Error() != lastErr {
			m.log.Warn("lifecycle run", "err", err) // once a distinct error: a step is retried every PollEvery
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
	}
}

// readStatus reads the stored Status (the zero Status: none yet); under
// State.Mu.
func (m *Manager) readStatus() (st lifecycle.Status, err error) {
	v, closer, err := m.st.Store.Get(StatusKey())
	if errors.Is(err, pebble.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	defer state.CloseInto(closer, &err, "lifecycle status")
	rec, err := state.DecodeBucketConf(v)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(rec.Doc), &st); err != nil {
		return st, fmt.Errorf("%w: lifecycle status: %v", state.ErrCorrupt, err)
	}
	return st, nil
}

// Status reads the runner's Status.
func (m *Manager) Status() (*lifecycle.Status, error) {
	st, err := state.Read(m.st, func() (lifecycle.Status, error) { return m.readStatus() })
	if err != nil {
		return nil, err
	}
	m.setCache(st)
	return &st, nil
}

func (m *Manager) setCache(st lifecycle.Status) {
	m.mu.Lock()
	m.cache = st
	m.mu.Unlock()
}

func (m *Manager) cached() lifecycle.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cache
}

// clone copies a Status (its maps too).
func clone(st lifecycle.Status) lifecycle.Status {
	st.Buckets, st.LastBuckets = maps.Clone(st.Buckets), maps.Clone(st.LastBuckets)
	return st
}

// put writes next in b, under State.Mu, if the stint is still stint.
func (m *Manager) put(b *pebble.Batch, next lifecycle.Status, stint uint64) error {
	if m.st.Stint != stint {
		return errStint
	}
	doc, err := json.Marshal(next)
	if err != nil {
		return err
	}
	state.Set(b, StatusKey(), state.BucketConfRecord{Updated: m.st.Cfg.Now(), Doc: string(doc)}.Encode())
	return nil
}

// write stores next alone (a run's start or end, a cursor, uploads
// aborted).
func (m *Manager) write(next lifecycle.Status, stint uint64) error {
	_, err := state.Mutate(m.st, func() (struct{}, *pebble.Batch, error) {
		b := m.st.Store.NewBatch()
		return struct{}{}, b, m.put(b, next, stint)
	})
	if err == nil {
		m.setCache(next)
	}
	return err
}

// count adds c to the run's counts, bucket's and the total.
func count(st *lifecycle.Status, bucket string, c lifecycle.Counts) {
	st.Run.Add(c)
	st.Total.Add(c)
	if st.Buckets == nil {
		st.Buckets = map[string]lifecycle.Counts{}
	}
	if _, ok := st.Buckets[bucket]; !ok && len(st.Buckets) >= MaxBucketsShown {
		bucket = OtherBuckets
	}
	bc := st.Buckets[bucket]
	bc.Add(c)
	st.Buckets[bucket] = bc
}

// buckets lists the buckets with an enabled lifecycle configuration, in
// name order, and the serving stint it read them in.
func (m *Manager) buckets() (names []string, stint uint64, err error) {
	type out struct {
		names []string
		stint uint64
	}
	o, err := state.Read(m.st, func() (out, error) {
		o := out{stint: m.st.Stint}
		for name := range m.st.Buckets {
			c, err := m.confLocked(name)
			if err != nil {
				m.log.Warn("lifecycle configuration unreadable: bucket skipped", "bucket", name, "err", err)
				continue
			}
			if c != nil && c.Enabled() {
				o.names = append(o.names, name)
			}
		}
		slices.Sort(o.names)
		return o, nil
	})
	return o.names, o.stint, err
}

// confLocked reads a bucket's lifecycle configuration (nil: none); under
// State.Mu.
func (m *Manager) confLocked(bucket string) (_ *lifecycle.Configuration, err error) {
	v, closer, err := m.st.Store.Get(state.BucketConfKey(bucket, s3meta.ConfLifecycle))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer state.CloseInto(closer, &err, "lifecycle configuration")
	rec, err := state.DecodeBucketConf(v)
	if err != nil {
		return nil, err
	}
	return lifecycle.Parse([]byte(rec.Doc))
}

// conf reads a bucket's enabled lifecycle configuration (nil: none, or
// none enabled), as each page of a run does: a change applies from the
// next page.
func (m *Manager) conf(bucket string) (*lifecycle.Configuration, error) {
	c, err := state.Read(m.st, func() (*lifecycle.Configuration, error) { return m.confLocked(bucket) })
	if err != nil || c == nil || !c.Enabled() {
		return nil, err
	}
	return c, nil
}

// wait paces n objects at Settings.Rate a second: false when stop closed
// first.
func (m *Manager) wait(n int, stop <-chan struct{}) bool {
	now := time.Now()
	if m.pace.Before(now) {
		m.pace = now
	}
	d := m.pace.Sub(now)
	m.pace = m.pace.Add(time.Duration(n) * time.Second / time.Duration(m.cfg.Rate))
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// step starts a run when one is due, or resumes the one under way, and
// runs it to its end (or until stop, a lost leadership or an error).
func (m *Manager) step(stop <-chan struct{}, serving func() bool) error {
	type read struct {
		st    lifecycle.Status
		stint uint64
	}
	r, err := state.Read(m.st, func() (read, error) {
		st, err := m.readStatus()
		return read{st, m.st.Stint}, err
	})
	if err != nil {
		return err
	}
	st := r.st
	m.setCache(st)
	now := m.st.Cfg.Now()
	if !st.Running && (!st.LastEnded.IsZero() && now.Sub(st.LastEnded) < m.cfg.Interval || time.Now().Before(m.idle)) {
		return nil // not due
	}
	names, stint, err := m.buckets()
	if err != nil {
		return err
	}
	if stint != r.stint {
		return errStint // the status read may be another leader's since
	}
	if !st.Running {
		if len(names) == 0 {
			m.idle = time.Now().Add(min(m.cfg.Interval, IdleRecheck))
			return nil // no bucket with rules: nothing is written
		}
		st = clone(st)
		st.Running, st.RunStarted, st.Bucket, st.Key, st.Uploads, st.Run, st.Buckets = true, now, "", "", false, lifecycle.Counts{}, nil
		if err := m.write(st, stint); err != nil {
			return err
		}
		m.log.Info("lifecycle run started", "buckets", len(names))
	}
	for _, name := range names {
		if name < st.Bucket {
			continue
		}
		if name != st.Bucket {
			st = clone(st)
			st.Bucket, st.Key, st.Uploads = name, "", false
		}
		if st, err = m.runBucket(stop, serving, st, stint); err != nil {
			return err
		}
	}
	st = clone(st)
	st.Running, st.LastStarted, st.LastEnded, st.Last, st.LastBuckets = false, st.RunStarted, m.st.Cfg.Now(), st.Run, st.Buckets
	st.Bucket, st.Key, st.Uploads, st.Run, st.Buckets = "", "", false, lifecycle.Counts{}, nil
	st.Runs++
	if err := m.write(st, stint); err != nil {
		return err
	}
	m.log.Info("lifecycle run ended", "expired", st.Last.Expired, "noncurrent", st.Last.Noncurrent, "markers_removed", st.Last.MarkersRemoved,
		"uploads_aborted", st.Last.UploadsAborted, "bytes_freed", st.Last.BytesFreed, "took", st.LastEnded.Sub(st.LastStarted))
	return nil
}

// live says whether the step may go on.
func live(stop <-chan struct{}, serving func() bool) error {
	select {
	case <-stop:
		return errStint
	default:
	}
	if !serving() {
		return errStint
	}
	return nil
}

// runBucket runs a bucket's rules from st's cursor: its keys, then its
// multipart uploads. It returns the Status as stored (or as kept in
// memory, for a cursor not yet written).
func (m *Manager) runBucket(stop <-chan struct{}, serving func() bool, st lifecycle.Status, stint uint64) (lifecycle.Status, error) {
	bucket := st.Bucket
	written := time.Now()
	for !st.Uploads {
		if err := live(stop, serving); err != nil {
			return st, err
		}
		conf, err := m.conf(bucket)
		if err != nil || conf == nil {
			return st, err // removed meanwhile: the bucket is done
		}
		keys, done, err := m.ns.ScanLifecycle(bucket, st.Key, m.cfg.Batch)
		if errors.Is(err, metaapi.ErrNoSuchBucket) {
			return st, nil // deleted meanwhile
		}
		if err != nil {
			return st, err
		}
		now := m.st.Cfg.Now()
		var acts []lifecycle.Action
		objects := 0
		for _, kv := range keys {
			if a := conf.Plan(kv, now, m.cfg.Day); !a.Empty() {
				acts = append(acts, a)
				objects += max(1, len(a.Remove))
			}
		}
		next := clone(st)
		if len(keys) > 0 {
			next.Key = keys[len(keys)-1].Key
		}
		if done {
			next.Key, next.Uploads = "", true
		}
		if len(acts) == 0 && !done && time.Since(written) < CursorEvery {
			st = next // the cursor moves in memory only
			continue
		}
		if !m.wait(objects, stop) {
			return st, errStint
		}
		_, err = m.ns.ApplyLifecycle(bucket, acts, func(b *pebble.Batch, c lifecycle.Counts) error {
			count(&next, bucket, c)
			return m.put(b, next, stint)
		})
		if errors.Is(err, metaapi.ErrNoSuchBucket) {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		m.setCache(next)
		st, written = next, time.Now()
	}
	conf, err := m.conf(bucket)
	if err != nil || conf == nil || !conf.HasUploadRules() {
		return st, err
	}
	return m.abortUploads(stop, serving, st, conf, stint)
}

// abortUploads aborts the bucket's multipart uploads due, a page at a
// time, from the cursor (st.Key: the key and upload ID last seen, 0x00
// between).
func (m *Manager) abortUploads(stop <-chan struct{}, serving func() bool, st lifecycle.Status, conf *lifecycle.Configuration, stint uint64) (lifecycle.Status, error) {
	bucket := st.Bucket
	for {
		if err := live(stop, serving); err != nil {
			return st, err
		}
		key, id := cut(st.Key)
		l, err := m.mp.ListUploads(&metaapi.ListUploads{Bucket: bucket, KeyMarker: key, UploadIDMarker: id, Limit: m.cfg.Batch})
		if errors.Is(err, metaapi.ErrNoSuchBucket) {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		now := m.st.Cfg.Now()
		var c lifecycle.Counts
		for _, u := range l.Uploads {
			if !conf.AbortDue(u.Key, u.Initiated, now, m.cfg.Day) {
				continue
			}
			if !m.wait(1, stop) {
				return st, errStint
			}
			err := m.mp.AbortUpload(u.UploadRef)
			if errors.Is(err, metaapi.ErrNoSuchUpload) || errors.Is(err, metaapi.ErrNotFound) {
				continue // completed or aborted meanwhile
			}
			if err != nil {
				return st, err
			}
			c.UploadsAborted++
		}
		next := clone(st)
		if n := len(l.Uploads); n > 0 {
			next.Key = l.Uploads[n-1].Key + "\x00" + l.Uploads[n-1].UploadID
		}
		if c != (lifecycle.Counts{}) || !l.Truncated {
			count(&next, bucket, c)
			if err := m.write(next, stint); err != nil {
				return st, err
			}
		}
		st = next
		if !l.Truncated {
			return st, nil
		}
	}
}

func cut(s string) (key, id string) {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}
