package metaapi

import "errors"

// Reasons refine an Error's code (Error.Reason): what exactly was not
// found, which rule a request broke. Callers (the S3 gateway, the key
// client, the commands) switch on them with errors.Is and the Err* value
// of each, never on a message; a server sends one when the error it
// answers wraps that value (ReasonOf).
const (
	// NOT_FOUND
	ReasonNoSuchBucket = "NO_SUCH_BUCKET"
	ReasonNoSuchKey    = "NO_SUCH_KEY"
	ReasonNoSuchUpload = "NO_SUCH_UPLOAD" // a multipart upload (s3.go)
	// INVALID
	ReasonInvalidBucketName = "INVALID_BUCKET_NAME" // ValidBucket
	ReasonInvalidKeyName    = "INVALID_KEY_NAME"    // ValidKey
	// A CompleteUpload refused: parts not in ascending order, a part
	// never uploaded (or of another ETag), a part other than the last
	// smaller than MinPartBytes.
	ReasonInvalidPartOrder = "INVALID_PART_ORDER"
	ReasonInvalidPart      = "INVALID_PART"
	ReasonPartTooSmall     = "PART_TOO_SMALL"
)

// Errors of the reasons. Each wraps the Err* value of its code, so that
// errors.Is(err, ErrNotFound) holds for an ErrNoSuchBucket too; a Client
// returns an *Error that unwraps to them (Error.Unwrap).
var (
	ErrNoSuchBucket      = newReason(ReasonNoSuchBucket, CodeNotFound, "no such bucket")
	ErrNoSuchKey         = newReason(ReasonNoSuchKey, CodeNotFound, "no such key")
	ErrNoSuchUpload      = newReason(ReasonNoSuchUpload, CodeNotFound, "no such upload")
	ErrInvalidBucketName = newReason(ReasonInvalidBucketName, CodeInvalid, "invalid bucket name")
	ErrInvalidKeyName    = newReason(ReasonInvalidKeyName, CodeInvalid, "invalid key name")
	ErrPartOrder         = newReason(ReasonInvalidPartOrder, CodeInvalid, "parts not in ascending order")
	ErrInvalidPart       = newReason(ReasonInvalidPart, CodeInvalid, "invalid part")
	ErrPartTooSmall      = newReason(ReasonPartTooSmall, CodeInvalid, "part too small")
)

// reasons are the errors of the reasons, by reason.
var reasons = map[string]*reasonError{}

// reasonError is the error of a reason: it reads as its text and unwraps
// to the Err* value of its code.
type reasonError struct {
	reason, code, text string
}

func (e *reasonError) Error() string { return e.text }

func (e *reasonError) Unwrap() error { return errorOf(e.code) }

func newReason(reason, code, text string) error {
	e := &reasonError{reason: reason, code: code, text: text}
	reasons[reason] = e
	return e
}

// ReasonOf is the reason a server answers err with: that of the error of
// a reason err wraps, when it is one of the code CodeOf gives err (a
// reason never contradicts the code); "" otherwise.
func ReasonOf(err error) string {
	var re *reasonError
	if !errors.As(err, &re) {
		return ""
	}
	if code, _ := CodeOf(err); code != re.code {
		return ""
	}
	return re.reason
}

// ErrorFor is the Error body a server answers err with (its status is
// CodeOf's): the code, the reason (ReasonOf) and err's message.
func ErrorFor(err error) Error {
	code, _ := CodeOf(err)
	return Error{Code: code, Reason: ReasonOf(err), Message: err.Error()}
}

// errorOfReason is the error of reason when it is one of code's, nil
// otherwise (an unknown reason, from a newer server, or none).
func errorOfReason(code, reason string) error {
	if re, ok := reasons[reason]; ok && re.code == code {
		return re
	}
	return nil
}
