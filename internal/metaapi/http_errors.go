package metaapi

// The error body of every answer that fails (the server side of the
// client's error decoding in api.go).

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// WriteError answers status with an error body of code and msg.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteErrorBody(w, status, Error{Code: code, Message: msg})
}

// WriteErrorBody answers status with e as the error body.
func WriteErrorBody(w http.ResponseWriter, status int, e Error) {
	b, err := json.Marshal(e)
	if err != nil { // an Error is strings only: never
		panic(fmt.Sprintf("metaapi: encode an error body: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// A failed write is a client gone: it has no one else to be told to.
	_, _ = w.Write(append(b, '\n'))
}
