package metaapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestErrorCodesRoundTrip(t *testing.T) {
	for _, sentinel := range []error{ErrInvalid, ErrNotFound, ErrExists, ErrNotEmpty, ErrNoPipeline, ErrUnavailable} {
		code, status := CodeOf(fmt.Errorf("ctx: %w", sentinel))
		if code == CodeInternal || status < 400 {
			t.Fatalf("%v: code %s status %d", sentinel, code, status)
		}
		var err error = &Error{Code: code, Message: "the server said so"}
		if !errors.Is(err, sentinel) || err.Error() != "the server said so" {
			t.Fatalf("code %s: errors.Is %v, message %q", code, errors.Is(err, sentinel), err)
		}
	}
	if code, status := CodeOf(errors.New("disk on fire")); code != CodeInternal || status != 500 {
		t.Fatalf("unknown error: %s %d", code, status)
	}
	if err := (&Error{Code: "WHAT"}); errors.Unwrap(err) != nil || err.Error() != "meta: WHAT" {
		t.Fatalf("unknown code: %v / %v", errors.Unwrap(err), err)
	}
}

func TestKeyPath(t *testing.T) {
	for _, k := range []string{"a", "a//b", "dir/", "x?y#z%25&", "sp ace/ü", "%2F"} {
		p := KeyPath("bkt", k)
		u, err := url.Parse("http://h" + p)
		if err != nil {
			t.Fatal(err)
		}
		rest := strings.TrimPrefix(u.EscapedPath(), "/v1/keys/bkt/")
		got, err := url.PathUnescape(rest)
		if err != nil || got != k {
			t.Fatalf("key %q: path %q decodes to %q (%v)", k, p, got, err)
		}
	}
}

func goodHeartbeat() Heartbeat {
	return Heartbeat{UUID: "0123456789abcdef", NodeID: 1, Addr: "127.0.0.1:9000", Capacity: 100, Used: 10,
		Containers: []ContainerReport{{ID: 1, State: ContainerOpen, UsedBytes: 5}, {ID: 2, State: ContainerClosed}},
		Pipelines:  []PipelineReport{{ID: 1, LeaderID: 1, Term: 2}}, DeletedBlocks: []BlockRef{{Container: 1, Local: 3}},
		CopyFailures: []CopyFailure{{Container: 7, Source: 2, Error: "connection refused"}, {Container: 8, Source: 0, Error: strings.Repeat("e", MaxCopyErrorBytes)}},
		Copying:      []uint64{9, 10}}
}

func TestHeartbeatValidate(t *testing.T) {
	hb := goodHeartbeat()
	if err := hb.Validate(); err != nil {
		t.Fatal(err)
	}
	// At the bounds: accepted.
	hb.CopyFailures = slices.Repeat([]CopyFailure{{Container: 1}}, MaxCopyFailuresReport)
	hb.Copying = make([]uint64, MaxCopyingReport)
	for i := range hb.Copying {
		hb.Copying[i] = uint64(i + 1)
	}
	if err := hb.Validate(); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	for name, mod := range map[string]func(*Heartbeat){
		"uuid long":       func(h *Heartbeat) { h.UUID = strings.Repeat("a", MaxUUIDBytes+1) },
		"uuid slash":      func(h *Heartbeat) { h.UUID = "a/b" },
		"addr host only":  func(h *Heartbeat) { h.Addr = "localhost" },
		"addr no host":    func(h *Heartbeat) { h.Addr = ":9000" },
		"addr bad port":   func(h *Heartbeat) { h.Addr = "h:70000" },
		"used > capacity": func(h *Heartbeat) { h.Used = 101 },
		"capacity absurd": func(h *Heartbeat) { h.Capacity = MaxReportBytes + 1 },
		"state lower":     func(h *Heartbeat) { h.Containers[0].State = "open" },
		"state CLOSING":   func(h *Heartbeat) { h.Containers[0].State = ContainerClosing },
		"dup container":   func(h *Heartbeat) { h.Containers[1].ID = 1 },
		"pipeline 0":      func(h *Heartbeat) { h.Pipelines[0].ID = 0 },
		"too many":        func(h *Heartbeat) { h.Pipelines = make([]PipelineReport, MaxReportedPipelines+1) },
		"deleted local 0": func(h *Heartbeat) { h.DeletedBlocks[0].Local = 0 },
		"copy failure 0":  func(h *Heartbeat) { h.CopyFailures[0].Container = 0 },
		"copy error long": func(h *Heartbeat) { h.CopyFailures[1].Error += "e" },
		"copy failures over bound": func(h *Heartbeat) {
			h.CopyFailures = slices.Repeat([]CopyFailure{{Container: 1}}, MaxCopyFailuresReport+1)
		},
		"copying 0":   func(h *Heartbeat) { h.Copying[1] = 0 },
		"copying dup": func(h *Heartbeat) { h.Copying[1] = h.Copying[0] },
		"copying over bound": func(h *Heartbeat) {
			h.Copying = make([]uint64, MaxCopyingReport+1)
			for i := range h.Copying {
				h.Copying[i] = uint64(i + 1)
			}
		},
	} {
		hb := goodHeartbeat()
		mod(&hb)
		if err := hb.Validate(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// FuzzHeartbeat: any JSON body either fails to decode, fails Validate with
// ErrInvalid, or is a heartbeat with the properties Validate promises.
func FuzzHeartbeat(f *testing.F) {
	b, _ := json.Marshal(goodHeartbeat())
	f.Add(b)
	f.Add([]byte(`{"uuid":"x","addr":"[::1]:1","containers":[{"id":1,"state":"DELETING"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var hb Heartbeat
		if json.Unmarshal(body, &hb) != nil {
			return
		}
		err := hb.Validate()
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate error not ErrInvalid: %v", err)
			}
			return
		}
		seen := map[uint64]bool{}
		for _, c := range hb.Containers {
			if c.ID == 0 || seen[c.ID] || c.UsedBytes > MaxReportBytes {
				t.Fatalf("accepted container report %+v", c)
			}
			seen[c.ID] = true
		}
		if len(hb.CopyFailures) > MaxCopyFailuresReport || len(hb.Copying) > MaxCopyingReport {
			t.Fatalf("accepted %d copy failures, %d copying", len(hb.CopyFailures), len(hb.Copying))
		}
		for _, f := range hb.CopyFailures {
			if f.Container == 0 || len(f.Error) > MaxCopyErrorBytes {
				t.Fatalf("accepted copy failure %+v", f)
			}
		}
		if hb.UUID == "" || validAddr(hb.Addr) != nil {
			t.Fatalf("accepted identity %q %q", hb.UUID, hb.Addr)
		}
	})
}
