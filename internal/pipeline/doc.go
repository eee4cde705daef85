// Package pipeline is Spindle's replicated write path: a datanode's
// multi-raft node (one event loop driving every pipeline the datanode is a
// member of, with go.etcd.io/raft/v3 RawNodes and asynchronous storage
// writes), its append worker (chunk bytes into block files, headers into the
// shared WAL, both made durable before a replica acknowledges), its apply
// worker, and the peer transport of raft messages.
//
// See docs/ARCHITECTURE.md §12 for the design; the entry data format is
// drawn in command.go.
package pipeline
