// Package pipeline is Spindle's replicated write path: a datanode's
// multi-raft node (one event loop driving every pipeline the datanode is a
// member of, with go.etcd.io/raft/v3 RawNodes and asynchronous storage
// writes), its append worker (chunk bytes into block files, headers into the
// shared WAL, both made durable before a replica acknowledges), its apply
// worker, and the peer transport of raft messages.
//
// Client requests of one connection are proposed in the order they
// arrived: the connection's one goroutine decodes them and posts them to the
// loop's event channel in that order, and the loop queues and proposes them
// per pipeline in that order. A block's chunks, which the engine takes only
// contiguously, are proposed in offset order when the client sends them so
// on one connection (the key client's ordered stream, ARCHITECTURE §12).
//
// See docs/ARCHITECTURE.md §12 for the design; the entry data format is
// drawn in command.go.
package pipeline
