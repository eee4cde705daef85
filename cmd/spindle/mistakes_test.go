package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIMistakes runs the command line's common mistakes, each as a user
// would type it, and checks that each is refused with a message that says
// what is wrong and the exit status the root help documents. One embedded
// cluster answers the ones that reach the meta service; it holds bucket
// "demo" with key "demo/hello" ("hello, spindle\n", 15 bytes).
func TestCLIMistakes(t *testing.T) {
	asPerson(t, true) // the mistakes of a person at a terminal
	addr := startEmbedded(t)
	t.Setenv("SPINDLE_META", addr)
	dir := t.TempDir()
	src := filepath.Join(dir, "five")
	if err := os.WriteFile(src, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing")
	if err := os.WriteFile(existing, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"bucket", "create", "demo"}, {"put", "demo/hello", "-"}} {
		if _, errOut, err := runIn(t, []byte("hello, spindle\n"), args...); err != nil {
			t.Fatalf("spindle %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
	}
	const unreachable = "127.0.0.1:1" // nothing listens on port 1

	for _, c := range []struct {
		args  []string
		stdin string
		code  int
		want  string
		// absent, when set, is a key the mistake must not have created.
		absent string
	}{
		// Commands that do not exist, or are missing.
		{args: []string{"frobnicate"}, code: exitUsage, want: `unknown command "frobnicate" for "spindle"`},
		{args: []string{"bench", "nonsense"}, code: exitUsage, want: `unknown command "nonsense" for "spindle bench"`},
		{args: []string{"report", "runn"}, code: exitUsage, want: "did you mean run?"},
		{args: []string{"admin", "nodez"}, code: exitUsage, want: "did you mean nodes?"},
		{args: []string{"admin", "safemode", "leave"}, code: exitUsage, want: `unknown command "leave" for "spindle admin safemode"`},
		{args: []string{"bucket", "destroy", "demo"}, code: exitUsage, want: `unknown command "destroy" for "spindle bucket"`},
		{args: []string{"bench"}, code: exitUsage, want: "spindle bench needs a command: baseline,"},
		{args: []string{"admin"}, code: exitUsage, want: "spindle admin needs a command"},
		{args: []string{"admin", "meta", "bakup", "/tmp/x"}, code: exitUsage, want: `unknown command "bakup" for "spindle admin meta"`},
		// Flags.
		{args: []string{"get", "--bogus", "demo/hello"}, code: exitUsage, want: "unknown flag: --bogus"},
		{args: []string{"put", "-x", "demo/k", src}, code: exitUsage, want: "unknown shorthand flag: 'x'"},
		{args: []string{"ls", "demo", "--max"}, code: exitUsage, want: "flag needs an argument: --max"},
		{args: []string{"ls", "--max", "-3", "demo"}, code: exitUsage, want: "--max -3"},
		{args: []string{"put", "--chunk-size", "12XB", "demo/k", src}, code: exitUsage, want: `invalid argument "12XB"`},
		{args: []string{"--log-level", "loud", "version"}, code: exitUsage, want: `--log-level "loud"`},
		{args: []string{"--config", filepath.Join(dir, "no-such.json"), "version"}, code: exitUsage, want: "no-such.json"},
		{args: []string{"get", "--offset", "-1", "demo/hello"}, code: exitUsage, want: "--offset -1"},
		// Arguments.
		{args: []string{"put"}, code: exitUsage, want: "accepts 2 arg(s), received 0"},
		{args: []string{"put", "demo/k"}, code: exitUsage, want: "accepts 2 arg(s), received 1"},
		{args: []string{"get"}, code: exitUsage, want: "accepts between 1 and 2 arg(s)"},
		{args: []string{"rm"}, code: exitUsage, want: "accepts 1 arg(s), received 0"},
		{args: []string{"stat", "demo/a", "demo/b"}, code: exitUsage, want: "accepts 1 arg(s), received 2"},
		{args: []string{"version", "extra"}, code: exitUsage, want: `unknown command "extra" for "spindle version"`},
		// Names.
		{args: []string{"put", "demo", src}, code: exitUsage, want: "want BUCKET/KEY"},
		{args: []string{"put", "Bad_Bucket/k", src}, code: exitUsage, want: "bucket name"},
		{args: []string{"put", "demo/../k", src}, code: exitUsage, want: `".." segment`},
		{args: []string{"bucket", "create", "ab"}, code: exitUsage, want: "bucket name"},
		{args: []string{"ls", "UPPER"}, code: exitUsage, want: "bucket name"},
		{args: []string{"--meta", "http://x/some/path", "ls", "demo"}, code: exitUsage, want: "--meta"},
		// Files.
		{args: []string{"get", "demo/hello", existing}, code: exitUsage, want: "exists: use --force to replace it"},
		{args: []string{"get", "demo/hello", dir}, code: exitUsage, want: "is a directory"},
		{args: []string{"put", "demo/k", filepath.Join(dir, "no-such-file")}, code: exitNotFound, want: "no such file", absent: "k"},
		{args: []string{"put", "demo/k", dir}, code: exitUsage, want: "is a directory", absent: "k"},
		// Sizes and ranges.
		{args: []string{"put", "--size", "10", "demo/short", "-"}, stdin: "12345", code: exitUsage, want: "the input ended after 5 of --size 10 bytes", absent: "short"},
		{args: []string{"put", "--size", "3", "demo/long", "-"}, stdin: "12345", code: exitUsage, want: "the input goes on past --size 3 bytes", absent: "long"},
		{args: []string{"put", "--size", "4", "demo/file", src}, code: exitUsage, want: "has 5 bytes, --size says 4", absent: "file"},
		{args: []string{"put", "--size", "-4", "demo/neg", "-"}, code: exitUsage, want: "--size", absent: "neg"},
		{args: []string{"get", "--offset", "100", "demo/hello"}, code: exitUsage, want: "--offset 100 is past the end of the 15-byte value"},
		// What is not there.
		{args: []string{"get", "demo/missing"}, code: exitNotFound, want: "unknown key demo/missing"},
		{args: []string{"stat", "nobucket/k"}, code: exitNotFound, want: "unknown bucket nobucket"},
		{args: []string{"rm", "demo/missing"}, code: exitNotFound, want: "unknown key demo/missing"},
		{args: []string{"ls", "nobucket"}, code: exitNotFound, want: "unknown bucket nobucket"},
		// Conflicts.
		{args: []string{"bucket", "create", "demo"}, code: exitFailure, want: "bucket demo already exists"},
		{args: []string{"bucket", "rm", "demo"}, code: exitFailure, want: "bucket demo is not empty"},
		// An unreachable service (plaintext: no local server wrote how to
		// reach it), and one of which nothing says how to reach it.
		{args: []string{"--meta", unreachable, "ls", "--insecure", "demo"}, code: exitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "bucket", "ls", "--insecure"}, code: exitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "admin", "nodes", "--insecure"}, code: exitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "put", "--insecure", "demo/k", src}, code: exitUnavailable, want: "meta unreachable at 127.0.0.1:1"},
		{args: []string{"--meta", unreachable, "ls", "demo"}, code: exitUsage, want: "no TLS settings for the meta service at 127.0.0.1:1: give --tls-cert, --tls-key and --tls-ca, or --insecure"},
		{args: []string{"ls", "--insecure", "--tls-ca", "ca.crt", "demo"}, code: exitUsage, want: "--insecure with --tls-cert/--tls-key/--tls-ca: choose one"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			// --meta given as a global flag is a flag of the key commands:
			// move it after the command, as cobra wants it.
			args := c.args
			if args[0] == "--meta" {
				args = append(append([]string{}, args[2:]...), args[:2]...)
			}
			_, stderr, err := runIn(t, []byte(c.stdin), args...)
			wantExit(t, err, c.code, c.want)
			if err != nil && !strings.Contains(stderr, err.Error()) {
				t.Errorf("stderr %q does not show the error %q", stderr, err)
			}
			if c.absent != "" {
				_, _, err := runIn(t, nil, "stat", "demo/"+c.absent)
				wantExit(t, err, exitNotFound, "unknown key demo/"+c.absent)
			}
		})
	}
	if got, err := os.ReadFile(existing); err != nil || string(got) != "keep me" {
		t.Errorf("the existing file holds %q (%v) after a get without --force", got, err)
	}
}
