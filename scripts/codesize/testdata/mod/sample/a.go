// Package sample is codesize's test input: 19 lines, T with 3 methods, G with 2.
package sample

type T struct{ n int }

func (t T) One() int { return t.n }

func (t *T) Two() int { return t.n * 2 }

func (t *T) three() {}

// G is generic: its methods count too.
type G[K comparable, V any] map[K]V

func (g G[K, V]) Len() int { return len(g) }

func (g *G[K, V]) Reset() { *g = nil }

func free() {}
