package meta

import (
	"github.com/spindle-store/spindle/internal/meta/namespace"
	"github.com/spindle-store/spindle/internal/meta/offline"
	"github.com/spindle-store/spindle/internal/meta/state"
)

// The names of the meta service's parts that its users (the server, the
// CLI, the benches) configure it with, kept here so that they need only
// this package.

// Config configures a meta service (state.Config).
type Config = state.Config

// ListOptions shapes a key listing (namespace.ListOptions).
type ListOptions = namespace.ListOptions

// PipelineSize is the number of datanodes in a pipeline.
const PipelineSize = state.PipelineSize

// Defaults of Config (state.Default*).
const (
	DefaultAllocationGrace           = state.DefaultAllocationGrace
	DefaultContainersPerPipeline     = state.DefaultContainersPerPipeline
	DefaultLeaveTimeout              = state.DefaultLeaveTimeout
	DefaultCopyRetryAfter            = state.DefaultCopyRetryAfter
	DefaultCopyTimeoutMin            = state.DefaultCopyTimeoutMin
	DefaultMaxCopiesPerSource        = state.DefaultMaxCopiesPerSource
	DefaultMaxCopiesPerTarget        = state.DefaultMaxCopiesPerTarget
	DefaultMaxInflightCopies         = state.DefaultMaxInflightCopies
	DefaultSafeModeContainerFraction = state.DefaultSafeModeContainerFraction
	DefaultSnapshotEntries           = state.DefaultSnapshotEntries
	DefaultLogRetainEntries          = state.DefaultLogRetainEntries
	DefaultMinLiveReplicas           = state.DefaultMinLiveReplicas
)

// The multipart errors the S3 gateway tells apart (namespace).
var (
	ErrPartOrder    = namespace.ErrPartOrder
	ErrInvalidPart  = namespace.ErrInvalidPart
	ErrPartTooSmall = namespace.ErrPartTooSmall
)

// GenerateKeys makes an S3 access key and secret (namespace.GenerateKeys).
func GenerateKeys() (access, secret string) { return namespace.GenerateKeys() }

// OfflineWriter writes a meta store without a running service
// (offline.OfflineWriter: spindle gen's closed containers and keys).
type OfflineWriter = offline.OfflineWriter

// CreateOffline starts a meta store in dir for an OfflineWriter
// (offline.CreateOffline).
func CreateOffline(dir string) (*OfflineWriter, error) { return offline.CreateOffline(dir) }
