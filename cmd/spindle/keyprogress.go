package main

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/spindle-store/spindle/internal/bench"
)

// Progress bars of put and get: drawn with vbauerster/mpb on stderr when it
// is a terminal, only once a transfer has taken progressDelay (short ones
// print nothing).
const (
	progressDelay = time.Second
	progressTick  = 150 * time.Millisecond
)

// transferProgress follows one transfer. set is called by the transfer
// (any goroutine); finish once, at its end. Its goroutine lives from
// start to finish.
type transferProgress struct {
	done    atomic.Int64
	stop    chan struct{}
	stopped sync.WaitGroup
	ok      atomic.Bool
	delay   time.Duration
	drawing chan struct{} // closed once the bar exists
}

func newTransferProgress(delay time.Duration) *transferProgress {
	return &transferProgress{stop: make(chan struct{}), delay: delay, drawing: make(chan struct{})}
}

// startTransferProgress starts following a transfer of total bytes (< 0:
// unknown) named name. It draws nothing unless enabled and w is the
// process's stderr on a terminal.
func startTransferProgress(w io.Writer, enabled bool, name string, total int64) *transferProgress {
	t := newTransferProgress(progressDelay)
	if !enabled || w != io.Writer(os.Stderr) || !bench.StderrIsTerminal() {
		return t
	}
	t.stopped.Add(1)
	go t.run(w, name, total)
	return t
}

func (t *transferProgress) set(n int64) { t.done.Store(n) }

// finish ends the transfer (ok: it succeeded) and waits for the bar.
func (t *transferProgress) finish(ok bool) {
	t.ok.Store(ok)
	close(t.stop)
	t.stopped.Wait()
}

// run waits progressDelay, then draws the bar until finish.
func (t *transferProgress) run(w io.Writer, name string, total int64) {
	defer t.stopped.Done()
	delay := time.NewTimer(t.delay)
	defer delay.Stop()
	select {
	case <-t.stop:
		return
	case <-delay.C:
	}
	p := mpb.New(mpb.WithOutput(w), mpb.WithAutoRefresh(), mpb.WithWidth(40), mpb.WithRefreshRate(progressTick))
	known := total >= 0
	var style mpb.BarFillerBuilder = mpb.BarStyle()
	count := decor.Counters(decor.SizeB1024(0), "% .1f / % .1f")
	if !known { // a spinner and the count
		style, count = mpb.SpinnerStyle(), decor.Current(decor.SizeB1024(0), "% .1f")
	}
	bar := p.New(max(total, 0), style,
		mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR)),
		mpb.AppendDecorators(count, decor.Name("  "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f")),
	)
	close(t.drawing)
	tick := time.NewTicker(progressTick)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			if n := t.done.Load(); t.ok.Load() {
				bar.SetCurrent(n)     // completes a bar of known total
				bar.SetTotal(n, true) // completes one of unknown total
			}
			bar.Abort(false) // ends it in every other case (no-op once complete)
			p.Wait()         // returns: the bar is complete or aborted
			return
		case <-tick.C:
			n := t.done.Load()
			if !known {
				bar.SetTotal(n+1, false) // keeps ahead of the count
			}
			bar.SetCurrent(n)
		}
	}
}
