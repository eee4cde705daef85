package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestKeyExitNotFound: cli.KeyExit tells a missing bucket from a missing key
// by the meta error's reason, not by its message: a no-such-bucket answer
// whose message does not name the bucket is still "unknown bucket", and a
// missing key whose name holds "bucket B" is still "unknown key".
func TestKeyExitNotFound(t *testing.T) {
	wire := func(reason, msg string) error {
		return fmt.Errorf("stat: %w", &metaapi.Error{Code: metaapi.CodeNotFound, Reason: reason, Message: msg})
	}
	for _, tc := range []struct {
		name        string
		err         error
		bucket, key string
		want        string
	}{
		{"no such bucket", wire(metaapi.ReasonNoSuchBucket, "meta: gone"), "b01", "k", "unknown bucket b01"},
		{"no such key named like a bucket", wire(metaapi.ReasonNoSuchKey, "no such key b01/bucket b01"), "b01", "bucket b01", "unknown key b01/bucket b01"},
		{"in process", fmt.Errorf("ls: %w b01", metaapi.ErrNoSuchBucket), "b01", "", "unknown bucket b01"},
		{"no reason, a key", wire("", "not found"), "b01", "k", "unknown key b01/k"},
	} {
		err := cli.KeyExit(tc.err, tc.bucket, tc.key)
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != cli.ExitNotFound || err.Error() != tc.want {
			t.Errorf("%s: cli.KeyExit(%v) = %v (exit %d), want %q, exit %d", tc.name, tc.err, err, cli.ExitCode(err), tc.want, cli.ExitNotFound)
		}
	}
}
