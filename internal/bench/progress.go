package bench

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// StderrIsTerminal reports whether file descriptor 2 is a terminal.
func StderrIsTerminal() bool {
	_, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
	return err == nil
}

// TerminalProgress returns where progress lines should go: os.Stderr when it
// is a terminal, io.Discard otherwise (so that logs and CI output stay clean).
// Progress never goes to stdout, which carries the result.
func TerminalProgress() io.Writer {
	if StderrIsTerminal() {
		return os.Stderr
	}
	return io.Discard
}

// progressWriter refreshes one status line on w from the workers' counters.
type progressWriter struct {
	done    chan struct{}
	stopped chan struct{}
}

func startProgress(w io.Writer, label string, workers []*worker, start time.Time, interval time.Duration) *progressWriter {
	ticker := time.NewTicker(interval)
	p := &progressWriter{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer ticker.Stop()
		runProgress(w, label, workers, start, ticker.C, p.done)
		close(p.stopped)
	}()
	return p
}

func (p *progressWriter) stop() {
	close(p.done)
	<-p.stopped
}

// runProgress prints a line per tick until done is closed, then erases it.
// The loop is bounded by done, which the load loop closes when it ends.
func runProgress(w io.Writer, label string, workers []*worker, start time.Time, tick <-chan time.Time, done <-chan struct{}) {
	if label == "" {
		label = "bench"
	}
	var lastOps, lastBytes int64
	last := start
	printed := false
	for {
		select {
		case <-done:
			if printed {
				_, _ = fmt.Fprint(w, "\r\033[K") // progress only: no bench fails for it
			}
			return
		case now := <-tick:
			var ops, bytes int64
			for _, wk := range workers {
				ops += wk.ops.Load()
				bytes += wk.bytes.Load()
			}
			dt := now.Sub(last).Seconds()
			if dt <= 0 {
				dt = 1
			}
			_, _ = fmt.Fprintf(w, "\r\033[K%s %6.1fs  %d ops  %.0f ops/s  %.2f MB/s",
				label, now.Sub(start).Seconds(), ops, float64(ops-lastOps)/dt, float64(bytes-lastBytes)/1e6/dt)
			lastOps, lastBytes, last = ops, bytes, now
			printed = true
		}
	}
}
