package s3gw

import (
	"errors"
	"strings"

	"github.com/versity/versitygw/s3err"

	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// s3Error is what versitygw renders as an S3 error body.
type s3Error interface {
	error
	BaseError() s3err.APIError
}

// toS3 turns an error of the meta service or the key client into the S3
// error it means; notFound is the code of a NOT_FOUND that is not about a
// bucket (NoSuchKey, NoSuchUpload). An S3 error found anywhere in the
// chain (a checksum or signature failure of versitygw's body readers,
// wrapped by the key client) is returned as is; anything else is an
// internal error.
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
	msg := err.Error()
	switch {
	case errors.Is(err, metaapi.ErrNotFound):
		if strings.Contains(msg, "not found: bucket ") {
			return s3err.GetAPIError(s3err.ErrNoSuchBucket)
		}
		return s3err.GetAPIError(notFound)
	case errors.Is(err, metaapi.ErrPrecondition):
		return s3err.GetAPIError(s3err.ErrPreconditionFailed)
	case errors.Is(err, metaapi.ErrNotEmpty):
		return s3err.GetAPIError(s3err.ErrBucketNotEmpty)
	case errors.Is(err, keyclient.ErrRange):
		return s3err.GetAPIError(s3err.ErrInvalidRange)
	case errors.Is(err, metaapi.ErrInvalid):
		switch {
		case strings.Contains(msg, meta.ErrPartOrder.Error()):
			return s3err.GetAPIError(s3err.ErrInvalidPartOrder)
		case strings.Contains(msg, meta.ErrInvalidPart.Error()):
			return s3err.GetAPIError(s3err.ErrInvalidPart)
		case strings.Contains(msg, meta.ErrPartTooSmall.Error()):
			return s3err.GetAPIError(s3err.ErrEntityTooSmall)
		case strings.Contains(msg, "key name") || strings.Contains(msg, "key \""):
			return s3err.GetAPIError(s3err.ErrInvalidRequest)
		}
		return s3err.GetAPIError(s3err.ErrInvalidRequest)
	case errors.Is(err, metaapi.ErrNoPipeline), errors.Is(err, metaapi.ErrUnavailable):
		return s3err.GetAPIError(s3err.ErrSlowDown)
	}
	return err
}
