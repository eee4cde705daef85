package console

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scrape is one server's /metrics (Prometheus text format) at one time.
type Scrape struct {
	// Source names the server (its metrics URL): counters are compared
	// with the same source's previous scrape only.
	Source string
	Text   []byte
}

// Point is one sample of the charts: rates over the sampler's last
// period. Ops are per second, bytes are MB/s (10^6), latencies mean
// milliseconds (0: no request in the period).
type Point struct {
	T time.Time `json:"t"`
	// PutOps: key commits (spindle_meta_key_commits_total); GetOps: key
	// look-ups (meta requests get_key, get_batch).
	PutOps float64 `json:"put_ops"`
	GetOps float64 `json:"get_ops"`
	// WriteMBps, ReadMBps: chunk bytes the datanodes wrote (every
	// replica's) and read.
	WriteMBps float64 `json:"write_mbps"`
	ReadMBps  float64 `json:"read_mbps"`
	// PutLatencyMs, GetLatencyMs: the meta service's mean time on commits
	// and look-ups; ChunkLatencyMs: the datanodes' on client requests.
	PutLatencyMs   float64 `json:"put_latency_ms"`
	GetLatencyMs   float64 `json:"get_latency_ms"`
	ChunkLatencyMs float64 `json:"chunk_latency_ms"`
}

// totals are one scrape's counters.
type totals struct {
	commits, gets, getSecs, commitReqs, commitSecs float64
	wrote, read, chunkReqs, chunkSecs              float64
}

func (a totals) sub(b totals) totals {
	d := func(x, y float64) float64 { return max(0, x-y) } // a restart: no negative rate
	return totals{d(a.commits, b.commits), d(a.gets, b.gets), d(a.getSecs, b.getSecs), d(a.commitReqs, b.commitReqs), d(a.commitSecs, b.commitSecs),
		d(a.wrote, b.wrote), d(a.read, b.read), d(a.chunkReqs, b.chunkReqs), d(a.chunkSecs, b.chunkSecs)}
}

func (a *totals) add(b totals) {
	a.commits += b.commits
	a.gets += b.gets
	a.getSecs += b.getSecs
	a.commitReqs += b.commitReqs
	a.commitSecs += b.commitSecs
	a.wrote += b.wrote
	a.read += b.read
	a.chunkReqs += b.chunkReqs
	a.chunkSecs += b.chunkSecs
}

// parseTotals reads the counters the charts need from Prometheus text.
func parseTotals(text []byte) totals {
	var t totals
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:sp], "{")
		route := func(rs ...string) bool {
			for _, r := range rs {
				if strings.Contains(labels, `route="`+r+`"`) {
					return true
				}
			}
			return false
		}
		switch name {
		case "spindle_meta_key_commits_total":
			t.commits += v
		case "spindle_meta_request_seconds_count":
			if route("get_key", "get_batch") {
				t.gets += v
			} else if route("commit_key", "commit_batch") {
				t.commitReqs += v
			}
		case "spindle_meta_request_seconds_sum":
			if route("get_key", "get_batch") {
				t.getSecs += v
			} else if route("commit_key", "commit_batch") {
				t.commitSecs += v
			}
		case "spindle_datanode_chunk_bytes_total":
			t.wrote += v
		case "spindle_datanode_chunk_read_bytes_total":
			t.read += v
		case "spindle_datanode_client_request_seconds_count":
			t.chunkReqs += v
		case "spindle_datanode_client_request_seconds_sum":
			t.chunkSecs += v
		}
	}
	return t
}

// Sampler keeps an hour of Points sampled from the servers' metrics.
type Sampler struct {
	scrape func(ctx context.Context) ([]Scrape, error)
	every  time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	ring   []Point // oldest first, at most cap
	max    int
	prev   map[string]totals
	prevAt time.Time

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewSampler samples scrape every period once started (nil scrape: never).
func NewSampler(scrape func(ctx context.Context) ([]Scrape, error), every time.Duration, log *slog.Logger) *Sampler {
	n := max(int(History/every), 2)
	return &Sampler{scrape: scrape, every: every, log: log, max: n, prev: map[string]totals{},
		stop: make(chan struct{}), done: make(chan struct{})}
}

// Every is the sampling period.
func (s *Sampler) Every() time.Duration { return s.every }

// Start starts the sampling goroutine.
func (s *Sampler) Start() {
	if s.scrape == nil {
		close(s.done)
		return
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			s.sampleOnce()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Stop stops the sampling and waits for it.
func (s *Sampler) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

func (s *Sampler) sampleOnce() {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.every, 2*time.Second))
	defer cancel()
	scrapes, err := s.scrape(ctx)
	if err != nil {
		s.log.Debug("console: metrics scrape", "err", err)
	}
	s.Add(time.Now(), scrapes)
}

// Add records scrapes taken at now: a Point of the rates since the
// previous call (none at the first).
func (s *Sampler) Add(now time.Time, scrapes []Scrape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := make(map[string]totals, len(scrapes))
	var d totals
	for _, sc := range scrapes {
		t := parseTotals(sc.Text)
		cur[sc.Source] = t
		if p, ok := s.prev[sc.Source]; ok {
			d.add(t.sub(p))
		}
	}
	prevAt := s.prevAt
	s.prev, s.prevAt = cur, now
	if prevAt.IsZero() {
		return
	}
	secs := now.Sub(prevAt).Seconds()
	if secs <= 0 {
		return
	}
	mean := func(sum, n float64) float64 {
		if n == 0 {
			return 0
		}
		return sum / n * 1000
	}
	p := Point{T: now, PutOps: d.commits / secs, GetOps: d.gets / secs, WriteMBps: d.wrote / secs / 1e6, ReadMBps: d.read / secs / 1e6,
		PutLatencyMs: mean(d.commitSecs, d.commitReqs), GetLatencyMs: mean(d.getSecs, d.gets), ChunkLatencyMs: mean(d.chunkSecs, d.chunkReqs)}
	if len(s.ring) == s.max {
		copy(s.ring, s.ring[1:])
		s.ring = s.ring[:len(s.ring)-1]
	}
	s.ring = append(s.ring, p)
}

// Points is a copy of the samples, oldest first.
func (s *Sampler) Points() []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Point(nil), s.ring...)
}
