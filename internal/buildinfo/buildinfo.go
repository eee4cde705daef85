// Package buildinfo identifies the running spindle binary: its release
// version, the VCS revision it was built from, and the Go toolchain and
// platform.
//
// Sources, in order of precedence:
//   - Version: the variable below, set at link time by the Makefile
//     (-ldflags "-X github.com/spindle-store/spindle/internal/buildinfo.Version=v1.2.3");
//     "0.1.0-dev" otherwise.
//   - Commit(): the link-time variable commit when set (the Makefile sets it
//     from `git describe --always --dirty`); otherwise the vcs.revision that
//     `go build` stamps into the binary, plus "-dirty" when vcs.modified is
//     true; otherwise "unknown" (e.g. `go run`, `go test`, or a build
//     outside a checkout).
//
// Invariants: every function returns a non-empty string and never fails.
//
// Concurrency: the variables are written only by the linker; all functions
// are safe for concurrent use.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, overridable with -ldflags -X.
var Version = "0.1.0-dev"

// commit is the VCS revision set with -ldflags -X; empty when not set.
var commit = ""

// Commit returns the VCS revision the binary was built from, "unknown" when
// it cannot be determined.
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	return commitFrom(commit, info, ok)
}

func commitFrom(override string, info *debug.BuildInfo, ok bool) string {
	if override != "" {
		return override
	}
	if !ok || info == nil {
		return "unknown"
	}
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified {
		rev += "-dirty"
	}
	return rev
}

// GoVersion returns the Go toolchain version the binary was built with.
func GoVersion() string { return runtime.Version() }

// Platform returns GOOS/GOARCH, e.g. "linux/amd64".
func Platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// String returns a one-line identification:
// "spindle 0.1.0-dev (commit 1a2b3c4, go1.26.8 linux/amd64)".
func String() string {
	return fmt.Sprintf("spindle %s (commit %s, %s %s)", Version, Commit(), GoVersion(), Platform())
}

// Info is the machine-readable identification (`spindle version --json`).
type Info struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// Get returns the identification of the running binary.
func Get() Info {
	return Info{Version: Version, Commit: Commit(), Go: GoVersion(), Platform: Platform()}
}
