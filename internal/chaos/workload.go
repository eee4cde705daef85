package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/spindle-store/spindle/internal/bench"
	"github.com/spindle-store/spindle/internal/keyclient"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/transport"
)

// Limits of the workload.
const (
	// opTimeout bounds one put, get or delete.
	opTimeout = 60 * time.Second
	// hotFraction of a writer's operations go to the hot keys, and
	// hotDeleteFraction of those are deletes.
	hotFraction       = 0.3
	hotDeleteFraction = 0.2
	// maxHotValueBytes bounds the hot keys' values (their history is
	// checked, not their bulk). Above the key client's inline limit
	// (64 KiB), so that about a quarter of the hot puts write a block
	// through a pipeline and the history covers the datanodes too, not
	// only the meta service.
	maxHotValueBytes = 256 << 10
	// unknownEffectWindow: how long after a put or delete returned an
	// unknown outcome (its request sent, no answer) it may still take
	// effect, for the linearizability check. The assumption: a request
	// that reached the meta service is applied, if at all, within the
	// client's own operation timeout of its failure (the meta service
	// holds no request longer; a killed one loses those it had not
	// applied). Before, such operations stayed open for ever.
	unknownEffectWindow = opTimeout
	// maxViolations bounds the violations kept for the report.
	maxViolations = 20
	coldKeyBase   = 1 << 40
	bucket        = "chaos"
)

// outcome of a put.
type outcome uint8

const (
	outAcked   outcome = iota + 1
	outFailed          // definitely not committed (failed before its CommitKey)
	outUnknown         // CommitKey was sent: committed or not
	// outRetired: an acknowledged key read back (every byte checked) and
	// then deleted by the workload to make room once MaxBytes was
	// reached; it may be present (its delete failed) or absent, never
	// wrong.
	outRetired
)

// coldRec is one cold key, written once: its size, its value's CRC32C and
// the first block of its value (a bitrot target).
type coldRec struct {
	size      int64
	crc       uint32
	out       outcome
	startNs   int64 // when its put began
	container uint64
	local     uint64
	blockLen  uint64
	pipeline  uint64
	index     int // in workload.cold
}

// opKind of a recorded operation.
type opKind uint8

const (
	opPut opKind = iota
	opGet
	opDelete
)

func (k opKind) String() string {
	switch k {
	case opPut:
		return "put"
	case opGet:
		return "get"
	case opDelete:
		return "delete"
	}
	return fmt.Sprintf("op%d", uint8(k))
}

// writeOps writes every recorded operation to path, one per line: start
// and end in seconds since the workload began, kind, class ("ok" for a
// success) and bytes; the first line gives the wall-clock start, so that
// the operations line up with the processes' logs.
func (w *workload) writeOps(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	fmt.Fprintf(bw, "# t0 %s\n# start_s\tend_s\tkind\tclass\tbytes\n", w.t0.UTC().Format(time.RFC3339Nano))
	for _, r := range w.ops {
		class := r.class
		if class == "" {
			class = "ok"
		}
		fmt.Fprintf(bw, "%.3f\t%.3f\t%s\t%s\t%d\n", float64(r.startNs)/1e9, float64(r.endNs)/1e9, r.kind, class, r.bytes)
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close() // the write's error is the one
		return err
	}
	return f.Close()
}

// opRec is one operation of the run, for the per-fault figures.
type opRec struct {
	startNs, endNs int64
	kind           opKind
	class          string // "" = success (a get or delete of a missing key included)
	bytes          int64
}

// workload is the writers' and readers' shared state.
type workload struct {
	cfg  *Config
	kc   *keyclient.Client
	t0   time.Time
	stop atomic.Bool

	mu       sync.Mutex
	cold     []coldRec
	ops      []opRec
	history  []porcupine.Operation
	lat      *bench.Latency
	opsCount atomic.Int64

	version   atomic.Uint64 // hot key versions, unique in the run
	coldBytes atomic.Int64  // bytes of cold values put or being put
	// budgetSpentNs: when MaxBytes was reached (0: not reached).
	budgetSpentNs atomic.Int64
	log           func(string, ...any)
	wrongReads    []wrongRead
	lostInRun     []string
	violations    []string
	samples       map[string]string // error class → its first error
}

type wrongRead struct {
	atNs int64
	msg  string
}

func (w *workload) now() int64 { return int64(time.Since(w.t0)) }

// violation records a broken invariant (the first maxViolations are kept).
func (w *workload) violation(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < maxViolations {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

func coldName(i int) string { return fmt.Sprintf("cold/%08d", i) }
func hotName(i int) string  { return fmt.Sprintf("hot/%02d", i) }

// record adds one operation (err: its error, kept as the sample of its
// class when it is the first); false once MaxOps were recorded.
func (w *workload) record(r opRec, d time.Duration, err error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.class != "" && err != nil {
		if w.samples == nil {
			w.samples = map[string]string{}
		}
		if _, ok := w.samples[r.class]; !ok {
			w.samples[r.class] = err.Error()
		}
	}
	if len(w.ops) >= w.cfg.MaxOps {
		return false
	}
	w.ops = append(w.ops, r)
	if r.class == "" {
		w.lat.Record(d)
	}
	return true
}

// randomAcked returns an acknowledged cold key (false: none yet).
func (w *workload) randomAcked(rng *rand.Rand) (coldRec, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range 64 {
		if len(w.cold) == 0 {
			break
		}
		r := w.cold[rng.IntN(len(w.cold))]
		if r.out == outAcked && r.blockLen > 0 {
			return r, true
		}
	}
	return coldRec{}, false
}

// randomAckedIndex returns the index of an acknowledged cold key.
func (w *workload) randomAckedIndex(rng *rand.Rand) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range 64 {
		if len(w.cold) == 0 {
			break
		}
		i := rng.IntN(len(w.cold))
		if w.cold[i].out == outAcked {
			return i, true
		}
	}
	return 0, false
}

// valueSize is log-uniform in [MinValueBytes, hi].
func valueSize(rng *rand.Rand, hi int64) int64 {
	lo := math.Log(MinValueBytes)
	return int64(math.Exp(lo + rng.Float64()*(math.Log(float64(hi))-lo)))
}

// errClass names an error's class for the report.
func errClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errWrongBytes):
		return "wrong_bytes"
	case errors.Is(err, keyclient.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, metaapi.ErrNotFound):
		return "not_found"
	case errors.Is(err, keyclient.ErrPipelineFailed):
		return "pipeline_failed"
	case errors.Is(err, metaapi.ErrNoPipeline):
		return "no_pipeline"
	case errors.Is(err, metaapi.ErrUnavailable), strings.Contains(err.Error(), "meta unreachable"):
		return "meta_unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case isStatus(err, transport.StatusNotFound):
		// a get of a version replaced or deleted meanwhile: its blocks
		// are gone from every replica
		return "block_not_found"
	}
	return "other"
}

// commitTracker is put in a Put's context; the tracking meta client marks
// it when the Put reaches its CommitKey (after which its outcome may be
// unknown).
type commitTracker struct{ sent atomic.Bool }

type trackerKey struct{}

// trackingMeta is the key client's meta service client, noting CommitKey
// calls in the context's commitTracker.
type trackingMeta struct{ *metaapi.Client }

func (m trackingMeta) CommitKey(ctx context.Context, b, k string, ck metaapi.CommitKey) (metaapi.KeyInfo, error) {
	if t, ok := ctx.Value(trackerKey{}).(*commitTracker); ok {
		t.sent.Store(true)
	}
	return m.Client.CommitKey(ctx, b, k, ck)
}

// put writes value id as name; it returns the outcome.
func (w *workload) put(ctx context.Context, name string, id valueID) (outcome, metaapi.KeyInfo, uint32, error) {
	tr := &commitTracker{}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, trackerKey{}, tr), opTimeout)
	defer cancel()
	vr := newValueReader(w.cfg.Seed, id)
	start := time.Now()
	startNs := w.now()
	res, err := w.kc.Put(ctx, bucket, name, vr, keyclient.PutOptions{})
	out := outAcked
	if err != nil {
		out = outFailed
		if tr.sent.Load() {
			out = outUnknown
		}
	} else if res.Key.CRC32C != vr.crc || res.Key.Size != uint64(id.size) {
		w.violation("put %s: the meta service recorded size %d crc %08x, the value has %d bytes crc %08x", name, res.Key.Size, res.Key.CRC32C, id.size, vr.crc)
	}
	rec := opRec{startNs: startNs, endNs: w.now(), kind: opPut, class: errClass(err)}
	if out == outUnknown {
		rec.class = "unknown_outcome"
	}
	if err == nil {
		rec.bytes = id.size
	}
	if !w.record(rec, time.Since(start), err) {
		w.stop.Store(true)
	}
	return out, res.Key, vr.crc, err
}

// get reads name into a checker; it returns the value received (found
// false: the key does not exist).
func (w *workload) get(ctx context.Context, name string, key uint64, during bool) (id valueID, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	chk := newValueChecker(w.cfg.Seed)
	start := time.Now()
	startNs := w.now()
	_, err = w.kc.Get(ctx, bucket, name, chk, keyclient.GetOptions{})
	endNs := w.now()
	switch {
	case errors.Is(err, metaapi.ErrNotFound) && chk.n == 0:
		err = nil
	case err == nil:
		found = true
		if id, err = chk.result(key); err != nil {
			w.mu.Lock()
			w.wrongReads = append(w.wrongReads, wrongRead{atNs: startNs, msg: fmt.Sprintf("get %s: %v", name, err)})
			w.mu.Unlock()
		}
	}
	if during {
		rec := opRec{startNs: startNs, endNs: endNs, kind: opGet, class: errClass(err)}
		if err == nil {
			rec.bytes = chk.n
		}
		if !w.record(rec, time.Since(start), err) {
			w.stop.Store(true)
		}
	}
	return id, found, err
}

// hotInput and hotOutput are the hot keys' operations in the history.
type hotInput struct {
	key     int
	op      opKind
	version uint64 // of a put
}

type hotOutput struct {
	version uint64 // of a get (0: absent)
	existed bool   // of a delete
	unknown bool   // a put or delete whose outcome is unknown
}

// addHistory records one hot key operation. One whose outcome is unknown
// may take effect until unknownEffectWindow after it returned its error:
// its return time is moved there (porcupine's search, which never ends on
// a 10-minute history when they stay open for ever, stays bounded).
func (w *workload) addHistory(client int, in hotInput, out hotOutput, call, ret int64) {
	if out.unknown {
		ret = max(ret, call) + int64(unknownEffectWindow)
	}
	w.mu.Lock()
	w.history = append(w.history, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	w.mu.Unlock()
}

// writer runs one writer until the run ends.
func (w *workload) writer(ctx context.Context, id int, end time.Time) {
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(id)*2+1))
	for time.Now().Before(end) && !w.stop.Load() && ctx.Err() == nil && w.opsCount.Add(1) <= int64(w.cfg.MaxOps) {
		size := valueSize(rng, MaxValueBytes)
		cold := rng.Float64() >= hotFraction || w.cfg.HotKeys == 0
		if cold && w.coldBytes.Add(size) > w.cfg.MaxBytes {
			w.coldBytes.Add(-size) // the budget is spent: make room, or hot keys only
			if w.budgetSpentNs.CompareAndSwap(0, w.now()) && w.log != nil {
				w.log("%.1fs: --max-bytes of values put; from now on cold keys are read back and deleted to make room for new ones", time.Since(w.t0).Seconds())
			}
			// Retiring one key frees its bytes for this put (or a later
			// one): the datanodes keep taking new blocks for the whole
			// run, within the budget.
			w.retireOne(ctx, rng)
			if w.coldBytes.Add(size) > w.cfg.MaxBytes {
				w.coldBytes.Add(-size)
				if w.cfg.HotKeys == 0 {
					return
				}
				cold = false
			}
		}
		if !cold {
			k := rng.IntN(w.cfg.HotKeys)
			name := hotName(k)
			call := w.now()
			if rng.Float64() < hotDeleteFraction {
				start := time.Now()
				dctx, cancel := context.WithTimeout(ctx, opTimeout)
				err := w.kc.Delete(dctx, bucket, name)
				cancel()
				ret := w.now()
				out := hotOutput{existed: err == nil}
				class := errClass(err)
				if errors.Is(err, metaapi.ErrNotFound) {
					class = ""
				} else if err != nil {
					out.unknown, class = true, "unknown_outcome"
				}
				w.addHistory(id, hotInput{key: k, op: opDelete}, out, call, ret)
				if !w.record(opRec{startNs: call, endNs: ret, kind: opDelete, class: class}, time.Since(start), err) {
					w.stop.Store(true)
				}
				continue
			}
			v := w.version.Add(1)
			out, _, _, _ := w.put(ctx, name, valueID{key: uint64(k), version: v, size: valueSize(rng, maxHotValueBytes)})
			switch out {
			case outAcked:
				w.addHistory(id, hotInput{key: k, op: opPut, version: v}, hotOutput{}, call, w.now())
			case outUnknown:
				w.addHistory(id, hotInput{key: k, op: opPut, version: v}, hotOutput{unknown: true}, call, w.now())
			}
			continue
		}
		w.mu.Lock()
		idx := len(w.cold)
		w.cold = append(w.cold, coldRec{startNs: w.now()})
		w.mu.Unlock()
		out, ki, crc, _ := w.put(ctx, coldName(idx), valueID{key: coldKeyBase + uint64(idx), version: 1, size: size})
		w.mu.Lock()
		r := &w.cold[idx]
		r.size, r.crc, r.out = size, crc, out
		if out == outAcked && len(ki.Blocks) > 0 {
			b := ki.Blocks[0]
			r.container, r.local, r.blockLen, r.pipeline, r.index = b.Container, b.Local, b.Length, b.Pipeline, idx
		}
		w.mu.Unlock()
	}
}

// retired says whether cold key i was retired (or is being retired):
// checkCold read its record before the retirement may have begun.
func (w *workload) retired(i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cold[i].out == outRetired
}

// retireOne picks an acknowledged cold key, marks it retired (readers
// and the bitrot fault pick acknowledged keys only), reads it back (every
// byte checked, as a reader would: a loss found here is a loss), deletes
// it and gives its bytes back to the budget. False: none found.
func (w *workload) retireOne(ctx context.Context, rng *rand.Rand) bool {
	i, ok := w.randomAckedIndex(rng)
	if !ok {
		return false
	}
	w.mu.Lock()
	if w.cold[i].out != outAcked {
		w.mu.Unlock()
		return false // another writer took it meanwhile
	}
	w.mu.Unlock()
	if why, _ := w.checkCold(ctx, i, true); why != "" {
		return false // counted by checkCold (lost, wrong) or unreadable now: keep it for the final check
	}
	w.mu.Lock()
	if w.cold[i].out != outAcked {
		w.mu.Unlock()
		return false
	}
	w.cold[i].out = outRetired
	size := w.cold[i].size
	w.mu.Unlock()
	start := time.Now()
	call := w.now()
	dctx, cancel := context.WithTimeout(ctx, opTimeout)
	err := w.kc.Delete(dctx, bucket, coldName(i))
	cancel()
	class := errClass(err)
	if errors.Is(err, metaapi.ErrNotFound) {
		// a delete the key client retried after an unknown outcome
		// may find its own work done
		class, err = "", nil
	}
	if !w.record(opRec{startNs: call, endNs: w.now(), kind: opDelete, class: class}, time.Since(start), err) {
		w.stop.Store(true)
	}
	if err == nil {
		w.coldBytes.Add(-size)
	}
	return true
}

// reader runs one reader until the run ends: gets of hot keys (into the
// history) and of acknowledged cold keys (every byte checked).
func (w *workload) reader(ctx context.Context, id int, end time.Time) {
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(id)*2+2))
	for time.Now().Before(end) && !w.stop.Load() && ctx.Err() == nil && w.opsCount.Add(1) <= int64(w.cfg.MaxOps) {
		if w.cfg.HotKeys > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(w.cfg.HotKeys)
			call := w.now()
			got, found, err := w.get(ctx, hotName(k), uint64(k), true)
			if err == nil {
				w.addHistory(id, hotInput{key: k, op: opGet}, hotOutput{version: got.version * b2u(found)}, call, w.now())
			}
			continue
		}
		i, ok := w.randomAckedIndex(rng)
		if !ok {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// What it finds is recorded (get's op record, lostInRun); the
		// verdict comes from the check after the run.
		_, _ = w.checkCold(ctx, i, true)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// checkCold reads cold key i and checks it against its record; it returns
// "" when it is as it must be, else why not ("lost", "partial", ...).
func (w *workload) checkCold(ctx context.Context, i int, during bool) (string, error) {
	w.mu.Lock()
	rec := w.cold[i]
	w.mu.Unlock()
	name := coldName(i)
	got, found, err := w.get(ctx, name, coldKeyBase+uint64(i), during)
	switch {
	case errors.Is(err, errWrongBytes):
		return "wrong", err
	case err != nil:
		return "unreadable", err
	case !found && rec.out == outAcked && !w.retired(i):
		if during {
			w.mu.Lock()
			w.lostInRun = append(w.lostInRun, name)
			w.mu.Unlock()
		}
		return "lost", fmt.Errorf("acknowledged key %s (%d bytes) not found", name, rec.size)
	case !found:
		return "", nil
	case got.version != 1 || got.size != rec.size:
		return "wrong", fmt.Errorf("%w: key %s holds version %d of %d bytes, put wrote version 1 of %d", errWrongBytes, name, got.version, got.size, rec.size)
	}
	return "", nil
}
