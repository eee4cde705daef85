package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAdminLifecycleStatus: spindle admin lifecycle status answers from
// the meta service, as text and as JSON, before any run.
func TestAdminLifecycleStatus(t *testing.T) {
	t.Setenv("SPINDLE_META", startEmbedded(t))
	out, errOut, err := runIn(t, nil, "admin", "lifecycle", "status")
	if err != nil || !strings.Contains(out, "no run under way") || !strings.Contains(out, "last run: none completed yet") {
		t.Fatalf("admin lifecycle status: %v\n%s%s", err, out, errOut)
	}
	out, errOut, err = runIn(t, nil, "admin", "lifecycle", "status", "--json")
	var st struct {
		Running bool   `json:"running"`
		Runs    uint64 `json:"runs"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Running || st.Runs != 0 {
		t.Fatalf("admin lifecycle status --json: %v\n%s%s", err, out, errOut)
	}
}
