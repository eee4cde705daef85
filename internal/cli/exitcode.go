package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Exit codes of spindle (documented in the root command's help).
const (
	ExitFailure     = 1 // any other failure
	ExitUsage       = 2 // bad command line: arguments, flags, names, ranges
	ExitNotFound    = 3 // no such key, bucket or file
	ExitUnavailable = 4 // meta service unreachable, no healthy pipeline, datanodes down
	ExitCorrupt     = 5 // data read back did not match its checksums
	ExitForbidden   = 6 // the certificate's role may not make the call, or it has no grant
)

const ExitCodesHelp = `Exit status:
  0 success
  1 failure
  2 usage: unknown or missing command, arguments, flags and their values in
    the environment or the --config file, invalid bucket or key names, an
    --offset past the end of the value, an output file that exists without
    --force, an input that does not match put --size
  3 not found: key, bucket or input file
  4 unavailable: meta service unreachable, no healthy pipeline, datanodes down
  5 corrupt data: checksums did not match on every replica
  6 forbidden: the certificate may not do this: administration needs an
    admin certificate; another's bucket needs a grant (spindle admin grant)`

// ExitError is an error with the exit status it gives.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Exit is err with the exit status code.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// UsageErr is err with the usage exit status.
func UsageErr(err error) error { return Exit(ExitUsage, err) }

// ExitCode is the status a command's error gives.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if errors.Is(err, metaapi.ErrForbidden) {
		return ExitForbidden
	}
	// cobra's own: unknown command, bad flag or argument count.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most"} {
		if strings.HasPrefix(msg, p) {
			return ExitUsage
		}
	}
	return ExitFailure
}

// KeyExit gives an error of the key or meta client its message and exit
// status. bucket and key name what the command was about ("" when none).
func KeyExit(err error, bucket, key string) error {
	what := bucket
	if key != "" {
		what = bucket + "/" + key
	}
	switch {
	case errors.Is(err, metaapi.ErrNotFound):
		switch {
		case bucket != "" && errors.Is(err, metaapi.ErrNoSuchBucket):
			return Exit(ExitNotFound, fmt.Errorf("unknown bucket %s", bucket))
		case key != "":
			return Exit(ExitNotFound, fmt.Errorf("unknown key %s", what))
		}
		return Exit(ExitNotFound, err)
	case errors.Is(err, metaapi.ErrInvalid), errors.Is(err, keyclient.ErrRange):
		return Exit(ExitUsage, err)
	case errors.Is(err, metaapi.ErrNoPipeline):
		return Exit(ExitUnavailable, fmt.Errorf("no healthy pipeline to write %s: %w", what, err))
	case errors.Is(err, metaapi.ErrUnavailable), errors.Is(err, keyclient.ErrPipelineFailed):
		return Exit(ExitUnavailable, err)
	case errors.Is(err, keyclient.ErrCorrupt):
		return Exit(ExitCorrupt, fmt.Errorf("corrupt data: %w", err))
	case errors.Is(err, metaapi.ErrExists):
		return Exit(ExitFailure, fmt.Errorf("bucket %s already exists", bucket))
	case errors.Is(err, metaapi.ErrNotEmpty):
		return Exit(ExitFailure, fmt.Errorf("bucket %s is not empty: delete its keys first", bucket))
	}
	return err
}
