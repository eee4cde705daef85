package sub

type U int

func (U) A() {}
