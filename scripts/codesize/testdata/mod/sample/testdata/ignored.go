package ignored

type I int

func (I) A() {}
