package scenario

import (
	"strings"
	"testing"

	"github.com/spindle-store/spindle/internal/bench"
)

// Other processes' CPU is the machine's busy time minus Spindle's (copies)
// or this process's (loopback limit), per second of the window; a share
// over otherCPUsNote is noted.
func TestOtherCPUs(t *testing.T) {
	res := &RereplicateResult{}
	res.Extra = map[string]any{}
	res.CPU = map[string]CPUUse{
		"copy":     {CPUWindow: bench.CPUWindow{BusyCPUSeconds: 3, Seconds: 1.5, ProcessCPUSeconds: 2.4}, CPUs: 2},
		"loopback": {CPUWindow: bench.CPUWindow{BusyCPUSeconds: 1.2, Seconds: 2}, CPUs: 2},
	}
	res.Limits.Loopback.CPUSeconds = 1.1
	otherCPUs(res)
	if o := res.Extra["other_cpus_during_copies"].(float64); o < 0.399 || o > 0.401 {
		t.Fatalf("other CPUs during the copies %v, want 0.4", o)
	}
	if o := res.Extra["other_cpus_during_loopback_limit"].(float64); o < 0.049 || o > 0.051 {
		t.Fatalf("other CPUs during the loopback limit %v, want 0.05", o)
	}
	notes := strings.Join(res.Notes, "\n")
	if !strings.Contains(notes, "0.40 of the 2 CPUs during the copies") || strings.Contains(notes, "during the loopback limit") {
		t.Fatalf("notes %q: want the copies' share noted, not the loopback's", notes)
	}
	// Without Spindle's process figure nothing is said about the copies.
	res = &RereplicateResult{CPU: map[string]CPUUse{"copy": {CPUWindow: bench.CPUWindow{BusyCPUSeconds: 3, Seconds: 1.5}, CPUs: 2}}}
	res.Extra = map[string]any{}
	otherCPUs(res)
	if _, ok := res.Extra["other_cpus_during_copies"]; ok {
		t.Fatal("other CPUs reported without Spindle's process CPU")
	}
}
