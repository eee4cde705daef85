package skipme

type S int

func (S) A() {}
