// Package audit is the meta service's audit log: one JSON line per change
// and per refusal (who, what, which bucket and key, when, from where, the
// outcome), written by the serving leader to a size-rotated file and to
// the service's log.
//
// The file: Path while it is under MaxBytes; then it is renamed Path.1
// (Path.1 to Path.2, … up to Keep files kept, the oldest removed) and a
// new Path is opened. Lines are buffered and written by one goroutine,
// flushed at least every FlushEvery and at Close; the file is not synced
// (an audit line is not an acknowledged write: a crash may lose the last
// second of them).
//
// Bounded and non-blocking: Record never waits. Events queue in a channel
// of QueueLen; when it is full (the disk is slow, full or failing) the
// event is dropped and counted (Dropped, the metric
// spindle_meta_audit_dropped_total), and a warning says how many were
// dropped at most once a minute. A write error is counted the same way
// (the events of the failed write are dropped) and the writer tries the
// file again with the next event: a full audit disk never stops the
// service, and never silently.
//
// Concurrency: Record and Dropped are safe for concurrent use; Close
// once, after the last Record (later ones are dropped).
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultMaxBytes = 64 << 20
	DefaultKeep     = 8
	QueueLen        = 8192
	FlushEvery      = time.Second
	// WarnEvery bounds the warnings about dropped events.
	WarnEvery = time.Minute
)

// Event is one audit line.
type Event struct {
	Time time.Time `json:"time"`
	// Who: the certificate ("cert:NAME"), the S3 user through the gateway
	// ("access-key:KEY (through cert:GATEWAY)"), or "unauthenticated".
	Who    string `json:"who"`
	Role   string `json:"role,omitempty"`
	Remote string `json:"remote,omitempty"`
	// Action: the route's name (commit_key, delete_key, grant, …) or what
	// a check decided on (overwrite).
	Action string `json:"action"`
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	// Outcome: "allowed" (an authorization that let a change through),
	// "refused", "done", "failed".
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Detail: what else the change was (a grant's principal and action).
	Detail string `json:"detail,omitempty"`
}

// Options configure a Log; zero values take the defaults.
type Options struct {
	Path     string
	MaxBytes int64
	Keep     int
	Logger   *slog.Logger
	// Quiet: the outcomes whose events go to Logger at Debug instead of
	// Info (a busy cluster's every put).
	Quiet func(Event) bool
}

// Log is an audit log. A nil *Log records nothing.
type Log struct {
	o       Options
	ch      chan Event
	dropped atomic.Uint64
	done    chan struct{}
	closed  atomic.Bool
	mu      sync.RWMutex // Close (write) against Record's send (read)
	err     error        // the writer's last error, Close's
}

// Open starts the log writing to o.Path (created 0600 with its
// directory, appended to).
func Open(o Options) (*Log, error) {
	if o.Path == "" {
		return nil, errors.New("audit: no path")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Keep <= 0 {
		o.Keep = DefaultKeep
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	w := &writer{o: o}
	if err := w.open(); err != nil {
		return nil, err
	}
	l := &Log{o: o, ch: make(chan Event, QueueLen), done: make(chan struct{})}
	go l.run(w)
	return l, nil
}

// Record queues e (its Time set when zero) and logs it; never blocks.
func (l *Log) Record(e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	lvl := slog.LevelInfo
	if e.Outcome == "refused" {
		lvl = slog.LevelWarn
	} else if l.o.Quiet != nil && l.o.Quiet(e) {
		lvl = slog.LevelDebug
	}
	l.o.Logger.Log(context.Background(), lvl, "audit", "who", e.Who, "action", e.Action, "bucket", e.Bucket, "key", e.Key,
		"outcome", e.Outcome, "reason", e.Reason, "detail", e.Detail, "remote", e.Remote)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed.Load() {
		l.dropped.Add(1)
		return
	}
	select {
	case l.ch <- e:
	default:
		l.dropped.Add(1)
	}
}

// Dropped is the number of events not written (queue full, write
// errors, after Close).
func (l *Log) Dropped() uint64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

// Close writes what is queued and closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closed.Swap(true) {
		l.mu.Unlock()
		return nil
	}
	close(l.ch)
	l.mu.Unlock()
	<-l.done
	return l.err
}

func (l *Log) run(w *writer) {
	defer close(l.done)
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	var warned time.Time
	var reported uint64
	fail := func(n int, err error) {
		l.dropped.Add(uint64(n))
		l.err = err
	}
	pending := 0 // events buffered since the last flush
	for {
		select {
		case e, ok := <-l.ch:
			if !ok {
				if err := w.flush(); err != nil {
					fail(pending, err)
				}
				if err := w.close(); err != nil {
					l.err = err
				}
				return
			}
			if err := w.write(e); err != nil {
				fail(pending+1, err)
				pending = 0
				continue
			}
			pending++
		case <-t.C:
			if err := w.flush(); err != nil {
				fail(pending, err)
			}
			pending = 0
			if d := l.dropped.Load(); d != reported && time.Since(warned) >= WarnEvery {
				l.o.Logger.Warn("audit events dropped (audit log full, slow or failing)", "dropped_total", d, "since_last_warning", d-reported, "path", l.o.Path, "err", l.err)
				warned, reported = time.Now(), d
			}
		}
	}
}

// writer is the rotated file, owned by Log.run.
type writer struct {
	o    Options
	f    *os.File
	bw   *bufio.Writer
	size int64
}

func (w *writer) open() error {
	if err := os.MkdirAll(dirOf(w.o.Path), 0o700); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	f, err := os.OpenFile(w.o.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return errors.Join(fmt.Errorf("audit: %w", err), f.Close())
	}
	w.f, w.bw, w.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i+1]
		}
	}
	return "."
}

// write appends e's line, rotating first when the file would pass
// MaxBytes; a file that failed (closed) is opened again first.
func (w *writer) write(e Event) error {
	line, err := json.Marshal(e)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if w.f == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	if w.size > 0 && w.size+int64(len(line)) > w.o.MaxBytes {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if _, err := w.bw.Write(line); err != nil {
		return w.broken(err)
	}
	w.size += int64(len(line))
	return nil
}

func (w *writer) flush() error {
	if w.f == nil {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		return w.broken(err)
	}
	return nil
}

// broken closes a file that failed a write: the next event opens it again.
func (w *writer) broken(err error) error {
	cerr := w.f.Close()
	w.f, w.bw = nil, nil
	return errors.Join(fmt.Errorf("audit: write %s: %w", w.o.Path, err), cerr)
}

// rotate moves Path to Path.1 (and Path.i to Path.i+1, Path.Keep-1 the
// oldest kept) and opens a new Path.
func (w *writer) rotate() error {
	if err := w.flush(); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		w.f, w.bw = nil, nil
		return fmt.Errorf("audit: close %s: %w", w.o.Path, err)
	}
	w.f, w.bw = nil, nil
	for i := w.o.Keep - 1; i >= 1; i-- {
		from := w.o.Path
		if i > 1 {
			from += "." + strconv.Itoa(i-1)
		}
		if err := os.Rename(from, w.o.Path+"."+strconv.Itoa(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit: rotate: %w", err)
		}
	}
	if w.o.Keep == 1 {
		if err := os.Remove(w.o.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit: rotate: %w", err)
		}
	}
	return w.open()
}

func (w *writer) close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f, w.bw = nil, nil
	return err
}
