package stack

// Stack is a last-in, first-out stack of ints.
type Stack struct {
	items []int
}

// Pop removes and returns the top of the stack.
func (s *Stack) Pop() int {
	x := s.items[len(s.items)-1]
	s.items = s.
	return x
}

// Push adds x on top of the stack.
func (s *Stack) Push(x int) {
	s.items = append(s.items, x)
}
