package datanode

import (
	"slices"
	"testing"
)

func TestReportQueue(t *testing.T) {
	q := newReportQueue[int](5)
	q.add(1, 2, 3)
	q.add(4, 5, 6, 7) // 6 and 7 do not fit
	if got := q.take(2); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("take 2: %v", got)
	}
	q.putBack([]int{1, 2}) // a failed heartbeat: back in front
	if got := q.take(10); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("take all: %v", got)
	}
	q.add(8, 9, 10, 11)
	q.putBack([]int{1, 2}) // no longer fits: dropped
	if got := q.take(10); !slices.Equal(got, []int{8, 9, 10, 11}) {
		t.Fatalf("after a put-back that does not fit: %v", got)
	}
	if got := q.take(3); len(got) != 0 {
		t.Fatalf("empty queue gave %v", got)
	}
}
