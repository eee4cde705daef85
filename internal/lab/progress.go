package lab

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progress shows what runs, how far the run is and how long it should
// still take. Implementations are called from the run's goroutine only.
type progress interface {
	// begin announces step i (0-based) of n; left is the estimate of
	// what remains, this step included.
	begin(i, n int, s step, left time.Duration)
	// end reports how step i ended.
	end(i, n int, s step, status, reason string, took time.Duration)
	// close ends the display; called once.
	close()
}

// eta estimates what remains: the steps' own estimates, corrected by how
// far the finished steps ran over or under theirs (the correction factor
// is bounded to [0.5, 4] so that one odd step does not swing it).
type eta struct {
	estimates  []time.Duration
	doneEst    time.Duration
	doneActual time.Duration
}

func (e *eta) left(from int) time.Duration {
	var rest time.Duration
	for _, d := range e.estimates[from:] {
		rest += d
	}
	f := 1.0
	if e.doneEst > 0 {
		f = min(max(float64(e.doneActual)/float64(e.doneEst), 0.5), 4)
	}
	return time.Duration(float64(rest) * f)
}

func (e *eta) finished(i int, took time.Duration) {
	e.doneEst += e.estimates[i]
	e.doneActual += took
}

// lineProgress prints one line when a step begins and one when it ends:
// for logs and pipes, where a redrawn bar would be noise. Progress only:
// its write errors are dropped, no run fails for a line lost.
type lineProgress struct {
	w     io.Writer
	start time.Time
}

func (p *lineProgress) begin(i, n int, s step, left time.Duration) {
	_, _ = fmt.Fprintf(p.w, "report run: [%d/%d] %s: %s (about %s left in the run, %s elapsed)\n",
		i+1, n, s.name, s.what, roundDur(left), roundDur(time.Since(p.start)))
}

func (p *lineProgress) end(i, n int, s step, status, reason string, took time.Duration) {
	msg := fmt.Sprintf("report run: [%d/%d] %s: %s in %s", i+1, n, s.name, status, roundDur(took))
	if reason != "" {
		msg += ": " + reason
	}
	_, _ = fmt.Fprintln(p.w, msg)
}

func (p *lineProgress) close() {}

// barProgress draws, on a terminal, one bar for the whole run (steps done,
// elapsed, ETA) and one for the running step (its estimate filled by the
// clock), with vbauerster/mpb. Finished steps are printed above the bars.
type barProgress struct {
	p       *mpb.Progress
	total   *mpb.Bar
	cur     *mpb.Bar
	curMax  int64 // the running step's bar total (its estimate in ms)
	stop    chan struct{}
	stopped sync.WaitGroup

	mu      sync.Mutex // guards the fields below, read by the decorators
	etaLeft time.Duration
	etaAt   time.Time
	done    int
	n       int
	start   time.Time
}

// tickEvery is how often the bars advance with the clock.
const tickEvery = 200 * time.Millisecond

func newBarProgress(w io.Writer, n int) *barProgress {
	b := &barProgress{p: mpb.New(mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(32), mpb.WithRefreshRate(tickEvery)), n: n, start: time.Now(), stop: make(chan struct{})}
	b.total = b.p.AddBar(int64(n),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			return fmt.Sprintf("report run  %d/%d steps", b.done, b.n)
		}, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			b.mu.Lock()
			defer b.mu.Unlock()
			left := b.etaLeft - time.Since(b.etaAt)
			return fmt.Sprintf("%s elapsed, ETA %s", roundDur(time.Since(b.start)), roundDur(max(left, 0)))
		})),
	)
	return b
}

func (b *barProgress) begin(i, n int, s step, left time.Duration) {
	b.mu.Lock()
	b.etaLeft, b.etaAt = left, time.Now()
	b.mu.Unlock()
	est := max(s.estimate, time.Millisecond)
	b.curMax = int64(est / time.Millisecond)
	b.cur = b.p.AddBar(b.curMax,
		mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(decor.Name(fmt.Sprintf("  %s", s.name), decor.WCSyncSpaceR)),
		mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO)),
	)
	cur := b.cur
	b.stop = make(chan struct{})
	stop := b.stop
	started := time.Now()
	b.stopped.Add(1)
	go func() { // bounded by stop, which end closes
		defer b.stopped.Done()
		t := time.NewTicker(tickEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				// The clock fills the step's bar up to 99% of its estimate.
				cur.SetCurrent(min(int64(time.Since(started)/time.Millisecond), int64(est/time.Millisecond)*99/100))
			}
		}
	}()
}

func (b *barProgress) end(i, n int, s step, status, reason string, took time.Duration) {
	close(b.stop)
	b.stopped.Wait()
	b.cur.SetCurrent(b.curMax) // complete: removed at the next refresh
	b.mu.Lock()
	b.done = i + 1
	b.mu.Unlock()
	b.total.SetCurrent(int64(i + 1))
	msg := fmt.Sprintf("[%d/%d] %s: %s in %s", i+1, n, s.name, status, roundDur(took))
	if reason != "" {
		msg += ": " + reason
	}
	_, _ = fmt.Fprintln(b.p, msg) // progress only, as lineProgress's
}

func (b *barProgress) close() {
	// A run that ended early (interrupted) leaves its bar where it was;
	// Abort is a no-op on a completed bar.
	b.total.Abort(false)
	b.p.Wait()
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
