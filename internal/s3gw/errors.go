package s3gw

import (
	"errors"

	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/s3gw/s3lock"
)

// s3Error is what versitygw renders as an S3 error body.
type s3Error interface {
	error
	BaseError() s3err.APIError
}

// toS3 turns an error of the meta service or the key client into the S3
// error it means, by the metaapi error it wraps (errors.Is; the reason of
// a meta answer says which bucket, key, upload or part rule it is about).
// notFound is the code of a NOT_FOUND without a reason (one that is not
// about a bucket, key or upload, or from a meta service older than
// reasons). An S3 error found anywhere in the chain (a checksum or
// signature failure of versitygw's body readers, wrapped by the key
// client) is returned as is; anything else is an internal error.
func toS3(err error, notFound s3err.ErrorCode) error {
	if err == nil {
		return nil
	}
	var se s3Error
	if errors.As(err, &se) {
		return se
	}
	var ae s3err.APIError
	if errors.As(err, &ae) {
		return ae
	}
	switch {
	case errors.Is(err, metaapi.ErrNoSuchBucket):
		return s3err.GetAPIError(s3err.ErrNoSuchBucket)
	case errors.Is(err, metaapi.ErrNoSuchKey):
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	case errors.Is(err, metaapi.ErrNoSuchUpload):
		return s3err.GetAPIError(s3err.ErrNoSuchUpload)
	case errors.Is(err, metaapi.ErrNotFound):
		return s3err.GetAPIError(notFound)
	case errors.Is(err, metaapi.ErrPrecondition):
		return s3err.GetAPIError(s3err.ErrPreconditionFailed)
	case errors.Is(err, metaapi.ErrNotEmpty):
		return s3err.GetAPIError(s3err.ErrBucketNotEmpty)
	case errors.Is(err, keyclient.ErrRange):
		return s3err.GetAPIError(s3err.ErrInvalidRange)
	case errors.Is(err, metaapi.ErrPartOrder):
		return s3err.GetAPIError(s3err.ErrInvalidPartOrder)
	case errors.Is(err, metaapi.ErrInvalidPart):
		return s3err.GetAPIError(s3err.ErrInvalidPart)
	case errors.Is(err, metaapi.ErrPartTooSmall):
		return s3err.GetAPIError(s3err.ErrEntityTooSmall)
	case s3lock.MissingConfig(err): // lock headers in a bucket without object lock
		return s3err.GetAPIError(s3err.ErrMissingObjectLockConfigurationNoSpaces)
	case errors.Is(err, metaapi.ErrInvalid): // an invalid key name among them
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	case errors.Is(err, metaapi.ErrForbidden): // the meta service's grants (an overwrite with write alone)
		return s3err.GetAPIError(s3err.ErrAccessDenied)
	case errors.Is(err, metaapi.ErrNoPipeline), errors.Is(err, metaapi.ErrUnavailable):
		return s3err.GetAPIError(s3err.ErrSlowDown)
	}
	return err
}
