package s3gw

import (
	"errors"
	"fmt"
	"testing"

	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestToS3 maps each error the gateway tells apart to its S3 code, both
// as the meta client returns it (an *metaapi.Error with a code and a
// reason, its message saying something else) and wrapped in process;
// notFound, the code for a NOT_FOUND without a reason, is chosen unlike
// the reason's wherever it could be confused with it.
func TestToS3(t *testing.T) {
	wire := func(code, reason string) error {
		return fmt.Errorf("key client: %w", &metaapi.Error{Code: code, Reason: reason, Message: "the meta service's message"})
	}
	for _, tc := range []struct {
		name     string
		err      error
		notFound s3err.ErrorCode
		want     s3err.ErrorCode
	}{
		{"no such bucket", wire(metaapi.CodeNotFound, metaapi.ReasonNoSuchBucket), s3err.ErrNoSuchKey, s3err.ErrNoSuchBucket},
		{"no such key", wire(metaapi.CodeNotFound, metaapi.ReasonNoSuchKey), s3err.ErrNoSuchUpload, s3err.ErrNoSuchKey},
		{"no such upload", wire(metaapi.CodeNotFound, metaapi.ReasonNoSuchUpload), s3err.ErrNoSuchKey, s3err.ErrNoSuchUpload},
		{"not found, no reason", wire(metaapi.CodeNotFound, ""), s3err.ErrNoSuchUpload, s3err.ErrNoSuchUpload},
		{"invalid part order", wire(metaapi.CodeInvalid, metaapi.ReasonInvalidPartOrder), s3err.ErrNoSuchKey, s3err.ErrInvalidPartOrder},
		{"invalid part", wire(metaapi.CodeInvalid, metaapi.ReasonInvalidPart), s3err.ErrNoSuchKey, s3err.ErrInvalidPart},
		{"part too small", wire(metaapi.CodeInvalid, metaapi.ReasonPartTooSmall), s3err.ErrNoSuchKey, s3err.ErrEntityTooSmall},
		{"invalid key name", wire(metaapi.CodeInvalid, metaapi.ReasonInvalidKeyName), s3err.ErrNoSuchKey, s3err.ErrInvalidRequest},
		{"invalid, no reason", wire(metaapi.CodeInvalid, ""), s3err.ErrNoSuchKey, s3err.ErrInvalidRequest},
		{"precondition", wire(metaapi.CodePrecondition, ""), s3err.ErrNoSuchKey, s3err.ErrPreconditionFailed},
		{"not empty", wire(metaapi.CodeNotEmpty, ""), s3err.ErrNoSuchBucket, s3err.ErrBucketNotEmpty},
		{"no pipeline", wire(metaapi.CodeNoPipeline, ""), s3err.ErrNoSuchKey, s3err.ErrSlowDown},
		{"unavailable", wire(metaapi.CodeUnavailable, ""), s3err.ErrNoSuchKey, s3err.ErrSlowDown},
		{"busy", wire(metaapi.CodeBusy, ""), s3err.ErrNoSuchKey, s3err.ErrSlowDown},
		{"forbidden (the grants)", wire(metaapi.CodeForbidden, ""), s3err.ErrNoSuchKey, s3err.ErrAccessDenied},
		{"in process: no such bucket", fmt.Errorf("put: %w b01", metaapi.ErrNoSuchBucket), s3err.ErrNoSuchKey, s3err.ErrNoSuchBucket},
		{"in process: part too small", fmt.Errorf("%w: part 1: %w", metaapi.ErrInvalid, metaapi.ErrPartTooSmall), s3err.ErrNoSuchKey, s3err.ErrEntityTooSmall},
		{"in process: bad key", metaapi.ValidKey("a/../b"), s3err.ErrNoSuchKey, s3err.ErrInvalidRequest},
		{"range", fmt.Errorf("get: %w", keyclient.ErrRange), s3err.ErrNoSuchKey, s3err.ErrInvalidRange},
		{"S3 error in the chain", fmt.Errorf("body: %w", s3err.GetAPIError(s3err.ErrBadDigest)), s3err.ErrNoSuchKey, s3err.ErrBadDigest},
	} {
		got := toS3(tc.err, tc.notFound)
		var ae s3err.APIError
		if !errors.As(got, &ae) {
			t.Errorf("%s: toS3(%v) = %v, not an S3 error", tc.name, tc.err, got)
		} else if want := s3err.GetAPIError(tc.want).Code; ae.Code != want {
			t.Errorf("%s: toS3(%v) = %s, want %s", tc.name, tc.err, ae.Code, want)
		}
	}
	if err := toS3(nil, s3err.ErrNoSuchKey); err != nil {
		t.Errorf("toS3(nil) = %v", err)
	}
	internal := errors.New("disk on fire")
	if err := toS3(internal, s3err.ErrNoSuchKey); err != internal {
		t.Errorf("an internal error: toS3 = %v, want it as is", err)
	}
}
