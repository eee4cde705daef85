// Package httpio holds the meta service's HTTP plumbing below its
// routes: request bodies read and decoded within state.MaxRequestBytes,
// answers written as JSON or metaapi.InlineContentType, and the handler
// a member's listener serves while its store opens.
//
// Invariants: a body is never read past state.MaxRequestBytes (an
// over-long one is metaapi.ErrInvalid, never truncated); a JSON body is
// one value and nothing after it. Concurrency: the functions are safe
// for any number of requests at once; Opening's Serve may be called
// while it answers (an atomic pointer), once.
package httpio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/spindle-store/spindle/internal/meta/state"
	"github.com/spindle-store/spindle/internal/metaapi"
)

// InlineAnswer is a GetKey answer sent as metaapi.InlineContentType.
type InlineAnswer struct {
	KI    *metaapi.KeyInfo // without Inline
	Value []byte
}

// GetsAnswer is a GetKeys answer, sent as metaapi.InlineContentType.
type GetsAnswer []metaapi.GetResult

// WriteJSON writes v as the answer with status: a GetsAnswer or an
// InlineAnswer in metaapi.InlineContentType, anything else as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusNoContent || v == nil {
		w.WriteHeader(status)
		return
	}
	var b []byte
	var err error
	ctype := metaapi.InlineContentType
	switch a := v.(type) {
	case GetsAnswer:
		b, err = metaapi.EncodeGetBatchResult(a)
	case InlineAnswer:
		b, err = metaapi.EncodeInline(a.KI, a.Value)
	default:
		ctype = "application/json"
		b, err = json.Marshal(v)
		b = append(b, '\n')
	}
	if err != nil {
		metaapi.WriteError(w, http.StatusInternalServerError, metaapi.CodeInternal, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(status)
	// A failed write is a client gone: it has no one else to be told to.
	_, _ = w.Write(b)
}

// DecodeBody reads one JSON value of at most MaxRequestBytes.
func DecodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, state.MaxRequestBytes))
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("%w: body over %d bytes", metaapi.ErrInvalid, state.MaxRequestBytes)
		}
		return fmt.Errorf("%w: bad JSON body: %v", metaapi.ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: bad JSON body: data after the value", metaapi.ErrInvalid)
	}
	return nil
}

// ReadBody reads a whole body of at most MaxRequestBytes.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, state.MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("%w: body over %d bytes", metaapi.ErrInvalid, state.MaxRequestBytes)
		}
		return nil, fmt.Errorf("%w: reading the body: %v", metaapi.ErrInvalid, err)
	}
	return body, nil
}

// DecodeInlineBody reads a CommitKey sent as metaapi.InlineContentType (at
// most MaxRequestBytes): the JSON without Inline, then the value.
func DecodeInlineBody(w http.ResponseWriter, r *http.Request, ck *metaapi.CommitKey) error {
	body, err := ReadBody(w, r)
	if err != nil {
		return err
	}
	value, err := metaapi.DecodeInline(body, ck)
	if err != nil {
		return err
	}
	if len(ck.Inline) > 0 {
		return fmt.Errorf("%w: inline body with a value in its JSON too", metaapi.ErrInvalid)
	}
	if len(value) > 0 {
		ck.Inline = value
	}
	return nil
}

// Opening answers every request UNAVAILABLE (not the leader, no leader
// known) until Serve hands it the service's handler: a meta member's
// listener while its store opens (meta.Start).
type Opening struct {
	h atomic.Pointer[http.Handler]
}

// Serve makes h answer every request from now on.
func (o *Opening) Serve(h http.Handler) { o.h.Store(&h) }

func (o *Opening) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := o.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	CloseAfterAnswer(w)
	metaapi.WriteErrorBody(w, http.StatusServiceUnavailable, metaapi.Error{Code: metaapi.CodeUnavailable,
		Message: "meta member opening its store: not serving yet", NotLeader: true})
}

// CloseAfterAnswer makes the answer close its connection (Connection:
// close), for an answer given without reading the request's body: net/http
// would otherwise read up to 256 KiB of that body before it answers, and a
// raft stream's body (raftnet) sends frames only as raft has messages, so
// its sender would get no answer while its frames went nowhere.
func CloseAfterAnswer(w http.ResponseWriter) { w.Header().Set("Connection", "close") }
