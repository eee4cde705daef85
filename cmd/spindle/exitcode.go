package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// Exit codes of spindle (documented in the root command's help).
const (
	exitFailure     = 1 // any other failure
	exitUsage       = 2 // bad command line: arguments, flags, names, ranges
	exitNotFound    = 3 // no such key, bucket or file
	exitUnavailable = 4 // meta service unreachable, no healthy pipeline, datanodes down
	exitCorrupt     = 5 // data read back did not match its checksums
	exitForbidden   = 6 // the certificate's role may not make the call
)

const exitCodesHelp = `Exit status:
  0 success
  1 failure
  2 usage: unknown or missing command, arguments, flags and their values in
    the environment or the --config file, invalid bucket or key names, an
    --offset past the end of the value, an output file that exists without
    --force, an input that does not match put --size
  3 not found: key, bucket or input file
  4 unavailable: meta service unreachable, no healthy pipeline, datanodes down
  5 corrupt data: checksums did not match on every replica
  6 forbidden: the certificate's role may not do this (deleting keys and
    buckets and administration need an admin certificate)`

// exitError is an error with the exit status it gives.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(err error) error { return &exitError{code: exitUsage, err: err} }

// exitCode is the status a command's error gives.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, metaapi.ErrForbidden) {
		return exitForbidden
	}
	// cobra's own: unknown command, bad flag or argument count.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitFailure
}

// keyExit gives an error of the key or meta client its message and exit
// status. bucket and key name what the command was about ("" when none).
func keyExit(err error, bucket, key string) error {
	what := bucket
	if key != "" {
		what = bucket + "/" + key
	}
	switch {
	case errors.Is(err, metaapi.ErrNotFound):
		switch {
		case bucket != "" && errors.Is(err, metaapi.ErrNoSuchBucket):
			return &exitError{exitNotFound, fmt.Errorf("unknown bucket %s", bucket)}
		case key != "":
			return &exitError{exitNotFound, fmt.Errorf("unknown key %s", what)}
		}
		return &exitError{exitNotFound, err}
	case errors.Is(err, metaapi.ErrInvalid), errors.Is(err, keyclient.ErrRange):
		return &exitError{exitUsage, err}
	case errors.Is(err, metaapi.ErrNoPipeline):
		return &exitError{exitUnavailable, fmt.Errorf("no healthy pipeline to write %s: %w", what, err)}
	case errors.Is(err, metaapi.ErrUnavailable), errors.Is(err, keyclient.ErrPipelineFailed):
		return &exitError{exitUnavailable, err}
	case errors.Is(err, keyclient.ErrCorrupt):
		return &exitError{exitCorrupt, fmt.Errorf("corrupt data: %w", err)}
	case errors.Is(err, metaapi.ErrExists):
		return &exitError{exitFailure, fmt.Errorf("bucket %s already exists", bucket)}
	case errors.Is(err, metaapi.ErrNotEmpty):
		return &exitError{exitFailure, fmt.Errorf("bucket %s is not empty: delete its keys first", bucket)}
	}
	return err
}
