package chaos

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// hotModel is a register per hot key: its state is the version it holds
// (0: absent). A put sets it; a get must see it; a delete empties it and
// must say whether the key existed (unless its outcome is unknown).
var hotModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		var keys []int
		for _, op := range h {
			k := op.Input.(hotInput).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(uint64), input.(hotInput), output.(hotOutput)
		switch in.op {
		case opPut:
			return true, in.version
		case opGet:
			return out.version == st, st
		default: // delete
			return out.unknown || out.existed == (st != 0), uint64(0)
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(hotInput), output.(hotOutput)
		switch in.op {
		case opPut:
			return fmt.Sprintf("put(%s, v%d) unknown=%v", hotName(in.key), in.version, out.unknown)
		case opGet:
			return fmt.Sprintf("get(%s) → v%d", hotName(in.key), out.version)
		}
		return fmt.Sprintf("delete(%s) existed=%v unknown=%v", hotName(in.key), out.existed, out.unknown)
	},
}

// checkLinearizable runs porcupine on h, bounded by timeout.
func checkLinearizable(h []porcupine.Operation, timeout time.Duration) (linResult, porcupine.LinearizationInfo) {
	res, info := porcupine.CheckOperationsVerbose(hotModel, h, timeout)
	switch res {
	case porcupine.Ok:
		return linOK, info
	case porcupine.Illegal:
		return linIllegal, info
	}
	return linUnknown, info
}
