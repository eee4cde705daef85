package metaapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fineErrors are the errors of the reasons, each with its coarse Err*.
var fineErrors = []struct {
	fine, coarse error
}{
	{ErrNoSuchBucket, ErrNotFound},
	{ErrNoSuchKey, ErrNotFound},
	{ErrNoSuchUpload, ErrNotFound},
	{ErrInvalidBucketName, ErrInvalid},
	{ErrInvalidKeyName, ErrInvalid},
	{ErrPartOrder, ErrInvalid},
	{ErrInvalidPart, ErrInvalid},
	{ErrPartTooSmall, ErrInvalid},
}

// errorServer answers every request with the error *serverErr as a meta
// service does: the status of CodeOf, the body of ErrorFor.
func errorServer(t *testing.T, serverErr *error) *Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, status := CodeOf(*serverErr)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if err := json.NewEncoder(w).Encode(ErrorFor(*serverErr)); err != nil {
			t.Errorf("errorServer: writing the error body: %v", err)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, ClientOptions{Attempts: 1, NoBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReasonRoundTrip: an error of a reason, wrapped with context on the
// server, comes back from the Client as an error that is both the fine
// and the coarse sentinel (and no other fine one), with the server's
// message.
func TestReasonRoundTrip(t *testing.T) {
	var serverErr error
	c := errorServer(t, &serverErr)
	for _, fe := range fineErrors {
		serverErr = fmt.Errorf("op on b01/k: %w x", fe.fine)
		_, err := c.GetKey(context.Background(), "b01", "k")
		if !errors.Is(err, fe.fine) || !errors.Is(err, fe.coarse) {
			t.Fatalf("server error %q: client error %v: errors.Is fine %v, coarse %v", serverErr, err, errors.Is(err, fe.fine), errors.Is(err, fe.coarse))
		}
		for _, other := range fineErrors {
			if other.fine != fe.fine && errors.Is(err, other.fine) {
				t.Fatalf("server error %q: client error %v is %v too", serverErr, err, other.fine)
			}
		}
		if err.Error() != serverErr.Error() {
			t.Fatalf("client error %q, server said %q", err, serverErr)
		}
	}
	// A coarse error crosses as itself, without a reason.
	serverErr = fmt.Errorf("%w: user u", ErrNotFound)
	_, err := c.GetKey(context.Background(), "b01", "k")
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrNoSuchBucket) || errors.Is(err, ErrNoSuchKey) {
		t.Fatalf("plain NOT_FOUND: %v", err)
	}
}

// TestReasonCompatibility: an answer without a reason (an older server),
// with one this client does not know (a newer server) or with one that is
// not of its code unwraps to its code's error alone; a server never sends
// a reason that contradicts its code.
func TestReasonCompatibility(t *testing.T) {
	for _, e := range []Error{
		{Code: CodeNotFound, Message: "not found: bucket b01"},
		{Code: CodeNotFound, Reason: "NO_SUCH_THING_YET", Message: "m"},
		{Code: CodeInvalid, Reason: ReasonNoSuchBucket, Message: "m"},
	} {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got Error
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		coarse := errorOf(e.Code)
		if !errors.Is(&got, coarse) || errors.Unwrap(&got) != coarse {
			t.Fatalf("%+v: unwraps to %v, want %v", e, errors.Unwrap(&got), coarse)
		}
	}
	mixed := fmt.Errorf("%w: %w", ErrInvalid, ErrNoSuchBucket)
	if e := ErrorFor(mixed); e.Code != CodeInvalid || e.Reason != "" {
		t.Fatalf("an INVALID wrapping a NOT_FOUND reason: %+v, want INVALID without a reason", e)
	}
	if e := ErrorFor(fmt.Errorf("x: %w", ErrPartTooSmall)); e.Code != CodeInvalid || e.Reason != ReasonPartTooSmall {
		t.Fatalf("part too small: %+v", e)
	}
}

// TestValidNamesReasons: the name checks' errors carry their reasons.
func TestValidNamesReasons(t *testing.T) {
	if err := ValidBucket("Bad_Bucket"); !errors.Is(err, ErrInvalidBucketName) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("ValidBucket: %v", err)
	}
	for _, k := range []string{"", "/a", "a/../b", "a\x01"} {
		if err := ValidKey(k); !errors.Is(err, ErrInvalidKeyName) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("ValidKey(%q): %v", k, err)
		}
	}
}
