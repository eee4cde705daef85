package metaapi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// InlineContentType is the body of a CommitKey carrying a value inline and
// of a GetKey answer for a key stored inline, when the client asked for it
// (Accept): the JSON value (CommitKey or KeyInfo, without Inline) and the
// raw value after it, so that the value is neither base64-encoded nor
// scanned by a JSON decoder (those dominated the CPU of a 4 KiB put):
//
//	| JSON length n u32 LE | n bytes of JSON | the value (the rest) |
//
// Plain JSON (Inline base64-encoded) is accepted and answered too.
const InlineContentType = "application/x-spindle-inline"

// EncodeInline builds an InlineContentType body of v (whose Inline field
// must be empty) and the value.
func EncodeInline(v any, value []byte) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 4+len(js)+len(value))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	return append(b, value...), nil
}

// DecodeInline splits an InlineContentType body: the JSON into v, and the
// value, which aliases body.
func DecodeInline(body []byte, v any) (value []byte, err error) {
	if len(body) < 4 {
		return nil, fmt.Errorf("%w: inline body of %d bytes", ErrInvalid, len(body))
	}
	n := binary.LittleEndian.Uint32(body)
	if uint64(n) > uint64(len(body)-4) {
		return nil, fmt.Errorf("%w: inline body: %d bytes of JSON announced, %d there", ErrInvalid, n, len(body)-4)
	}
	if err := json.Unmarshal(body[4:4+n], v); err != nil {
		return nil, fmt.Errorf("%w: inline body: %v", ErrInvalid, err)
	}
	return body[4+n:], nil
}
