package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spindle-store/spindle/internal/transport"
)

// metrics are a node's Prometheus metrics, registered in the registry of
// Config.Metrics (none when nil: the counters still count, unexported).
// Counters are updated by the goroutine doing the work (atomics inside
// the client library), so reading them never takes the loop's time.
type metrics struct {
	chunkWrites    prometheus.Counter
	chunkBytes     prometheus.Counter
	appendRounds   prometheus.Counter
	appendBatch    prometheus.Histogram
	appendSeconds  prometheus.Histogram
	leaderChanges  prometheus.Counter
	proposals      *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	// answeredBy caches proposals' and requestSeconds' children by kind
	// and status (answered): looking a child up by its label values
	// hashes them and takes the vector's lock, 4 % of a leader's CPU at
	// 1 KiB writes, once per request.
	answeredBy [answerKinds][answerStatuses]atomic.Pointer[answerMetrics]
	applied    prometheus.Counter
	// replicaFailures counts local failures that made this replica leave
	// a pipeline (by op: write_chunk, put_block); refusals counts
	// commands refused as on every replica (by kind).
	replicaFailures *prometheus.CounterVec
	refusals        *prometheus.CounterVec
	// authRefused counts frames refused for their sender's certificate
	// (auth.go), by what: "raft message" or "request".
	authRefused *prometheus.CounterVec
	// staleRaftPayloads counts MsgApp frames of an older term whose
	// payload was dropped unread.
	staleRaftPayloads prometheus.Counter
	// replyOverflows counts client connections closed because their
	// reply queue overflowed (maxQueuedRepliesPerConn).
	replyOverflows prometheus.Counter
	// readBackMisses counts chunks a leader could not read back for a
	// follower's catch-up (sent without bytes, see peer.readBack).
	readBackMisses prometheus.Counter
	// goneChunks counts chunks a follower was sent without bytes because
	// their block is deleted later in the log, and did not store (gone.go).
	goneChunks prometheus.Counter
	// chunkReads, chunkReadBytes: client reads served (ReadChunk);
	// readErrors: those refused, by kind (readErrorKind).
	chunkReads     prometheus.Counter
	chunkReadBytes prometheus.Counter
	readErrors     *prometheus.CounterVec
}

func newMetrics(n *Node, reg prometheus.Registerer) *metrics {
	m := &metrics{
		chunkWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_chunk_writes_total",
			Help: "Replicated chunks written into block files (leader and follower), at append time."}),
		chunkBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_chunk_bytes_total",
			Help: "Bytes of the replicated chunks written."}),
		appendRounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_append_rounds_total",
			Help: "Append worker rounds (chunk writes, engine sync, WAL append and sync for everything queued)."}),
		appendBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spindle_datanode_append_round_chunks",
			Help: "Chunks per append round (the batching the load brings).", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spindle_datanode_append_round_seconds",
			Help: "Duration of an append round, until log and data are durable.", Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_raft_leader_changes_total",
			Help: "Leader changes seen, all pipelines."}),
		proposals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_datanode_client_requests_total",
			Help: "Client write requests answered, by kind and status."}, []string{"kind", "status"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spindle_datanode_client_request_seconds",
			Help: "Client write requests from arrival to answer (committed and applied), by kind.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"kind"}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_entries_applied_total",
			Help: "Raft entries applied, all pipelines."}),
		replicaFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_datanode_replica_failures_total",
			Help: "Chunk writes or block commits that failed on this replica alone (EIO, ENOSPC, UNHEALTHY container, overlap): never acknowledged; the replica left its pipeline and its container was marked UNHEALTHY."}, []string{"op"}),
		staleRaftPayloads: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_stale_raft_payloads_total",
			Help: "MsgApp frames of a term older than their group's, dropped unread (raft rejects them)."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_datanode_refusals_total",
			Help: "Replicated commands refused as on every replica (checksum mismatch, invalid, hole, closed container; a chunk past the container's room, refused by the leader before it is proposed), by kind."}, []string{"kind"}),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_datanode_refused_total",
			Help: "Frames refused for their sender's certificate (its role, or a raft message from a non-member or under another member's certificate), by what."}, []string{"what"}),
		replyOverflows: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_reply_overflows_total",
			Help: "Client connections closed because they did not read their responses (reply queue full)."}),
		chunkReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_chunk_reads_total",
			Help: "Client chunk reads served (verified against their CRC32C)."}),
		chunkReadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_chunk_read_bytes_total",
			Help: "Bytes of the client chunk reads served."}),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spindle_datanode_read_errors_total",
			Help: "Client chunk reads refused, by kind: checksum (the bytes on disk failed their CRC32C; the container is marked UNHEALTHY), not_found, invalid, other."}, []string{"kind"}),
		readBackMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_read_back_misses_total",
			Help: "Chunks this leader could not read back from its engine for a follower's catch-up (deleted, refused everywhere, or damaged here): sent without bytes."}),
		goneChunks: prometheus.NewCounter(prometheus.CounterOpts{Name: "spindle_datanode_gone_chunks_total",
			Help: "Chunks a caught-up follower did not store because their block is deleted by a committed entry later in the log (its leader said so): a gone mark was written instead."}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.chunkWrites, m.chunkBytes, m.appendRounds, m.appendBatch, m.appendSeconds, m.leaderChanges, m.proposals, m.requestSeconds, m.applied, m.replicaFailures, m.refusals, m.authRefused, m.replyOverflows, m.staleRaftPayloads, m.readBackMisses, m.goneChunks, m.chunkReads, m.chunkReadBytes, m.readErrors)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_pipelines", Help: "Pipelines served."},
			func() float64 { return float64(len(n.Pipelines())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_pipelines_led", Help: "Pipelines this node leads."},
			func() float64 {
				c := 0
				for _, p := range n.Pipelines() {
					if p.Leader == n.cfg.ID {
						c++
					}
				}
				return float64(c)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "spindle_datanode_containers", Help: "Containers on this node's volumes."},
			func() float64 { return float64(len(n.eng.ListContainers())) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_wal_syncs_total", Help: "fdatasyncs of the shared raft log."},
			func() float64 { return float64(n.wal.Stats().SyncDatas) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_wal_rounds_total", Help: "Group-commit rounds of the shared raft log."},
			func() float64 { return float64(n.wal.Stats().Rounds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_wal_records_total", Help: "Records appended to the shared raft log."},
			func() float64 { return float64(n.wal.Stats().Records) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_engine_file_syncs_total", Help: "fdatasyncs of block files."},
			func() float64 { return float64(n.eng.SyncStats().FileSyncs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_engine_sync_rounds_total", Help: "Engine group-commit rounds."},
			func() float64 { return float64(n.eng.SyncStats().Rounds) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spindle_datanode_chunk_writes_inline_total", Help: "Chunk writes whose bytes travelled in their raft entry (--log-inline-max-bytes): block file written without a sync of its own."},
			func() float64 { return float64(n.inlineWrites.Load()) }),
	)
	return m
}

// answerKinds and answerStatuses bound the kinds and statuses whose
// metrics answered caches; others are looked up each time.
const (
	answerKinds    = 8
	answerStatuses = 32
)

// answerMetrics are the children of proposals and requestSeconds for one
// kind and status.
type answerMetrics struct {
	requests prometheus.Counter
	seconds  prometheus.Observer
}

// answered counts a client request's answer and observes its latency.
func (m *metrics) answered(p *proposal, st transport.Status) {
	am := m.answerMetricsOf(p.kind, st)
	am.requests.Inc()
	if !p.arrived.IsZero() {
		am.seconds.Observe(time.Since(p.arrived).Seconds())
	}
}

func (m *metrics) answerMetricsOf(k Kind, st transport.Status) *answerMetrics {
	cached := int(k) < answerKinds && int(st) < answerStatuses
	if cached {
		if am := m.answeredBy[k][st].Load(); am != nil {
			return am
		}
	}
	ks := k.String()
	am := &answerMetrics{requests: m.proposals.WithLabelValues(ks, st.String()), seconds: m.requestSeconds.WithLabelValues(ks)}
	if cached {
		m.answeredBy[k][st].Store(am) // a racing store stores the same children
	}
	return am
}
