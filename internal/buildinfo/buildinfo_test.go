package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestCommitFrom(t *testing.T) {
	withVCS := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i+1 < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	tests := []struct {
		name     string
		override string
		info     *debug.BuildInfo
		ok       bool
		want     string
	}{
		{"ldflags wins", "v1-3-gabc-dirty", withVCS("vcs.revision", "deadbeef"), true, "v1-3-gabc-dirty"},
		{"clean revision", "", withVCS("vcs.revision", "deadbeef", "vcs.modified", "false"), true, "deadbeef"},
		{"dirty revision", "", withVCS("vcs.revision", "deadbeef", "vcs.modified", "true"), true, "deadbeef-dirty"},
		{"no vcs settings", "", withVCS("-compiler", "gc"), true, "unknown"},
		{"no build info", "", nil, false, "unknown"},
	}
	for _, tt := range tests {
		if got := commitFrom(tt.override, tt.info, tt.ok); got != tt.want {
			t.Errorf("%s: commitFrom = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	s := String()
	for _, want := range []string{"spindle " + Version, "commit " + Commit(), runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, missing %q", s, want)
		}
	}
	if strings.Contains(s, "\n") {
		t.Errorf("String() = %q spans several lines", s)
	}
	if Commit() == "" {
		t.Error("Commit() is empty")
	}
}

func TestGet(t *testing.T) {
	i := Get()
	if i.Version != Version || i.Commit != Commit() || i.Go != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v", i)
	}
}
