package wal

import (
	"fmt"
	"log/slog"

	"go.etcd.io/raft/v3"
)

// RaftLogger sends etcd raft's logs to slog (raft.Logger): debug dropped,
// info at debug level, warnings and errors as such; Fatal and Panic log
// and panic. Shared by every raft group (pipelines, the meta group).
type RaftLogger struct{ L *slog.Logger }

var _ raft.Logger = RaftLogger{}

func (r RaftLogger) Debug(v ...any)              {}
func (r RaftLogger) Debugf(f string, v ...any)   {}
func (r RaftLogger) Info(v ...any)               { r.L.Debug(fmt.Sprint(v...)) }
func (r RaftLogger) Infof(f string, v ...any)    { r.L.Debug(fmt.Sprintf(f, v...)) }
func (r RaftLogger) Warning(v ...any)            { r.L.Warn(fmt.Sprint(v...)) }
func (r RaftLogger) Warningf(f string, v ...any) { r.L.Warn(fmt.Sprintf(f, v...)) }
func (r RaftLogger) Error(v ...any)              { r.L.Error(fmt.Sprint(v...)) }
func (r RaftLogger) Errorf(f string, v ...any)   { r.L.Error(fmt.Sprintf(f, v...)) }
func (r RaftLogger) Fatal(v ...any)              { r.L.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r RaftLogger) Fatalf(f string, v ...any)   { r.Fatal(fmt.Sprintf(f, v...)) }
func (r RaftLogger) Panic(v ...any)              { r.Fatal(v...) }
func (r RaftLogger) Panicf(f string, v ...any)   { r.Fatal(fmt.Sprintf(f, v...)) }
