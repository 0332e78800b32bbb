// Package cleanup undoes a half-built thing in one place. Starting a run acquires a series of
// resources (minted credentials, relayed streams, a launched sandbox, a run directory, a gateway);
// any step may fail, and each failure must release what the earlier steps acquired, in reverse order.
// Writing that out on every error path is how a path gets missed (a token left minted, a run
// directory left behind), so a Stack collects the undo actions as the steps succeed, runs them all if
// the build fails, and is released (runs nothing) once the thing is complete. It follows gVisor's
// pkg/cleanup: Make, Add, Release, Clean.
package cleanup

// Stack holds undo actions, run last-added first. The zero value is ready to use. It is not safe for
// concurrent use: the build it protects is sequential.
type Stack struct {
	fns []func()
}

// Make returns a stack whose first action is fn (nil for none).
func Make(fn func()) *Stack {
	s := &Stack{}
	s.Add(fn)
	return s
}

// Add pushes fn; Clean runs it before every action added earlier. A nil fn is ignored.
func (s *Stack) Add(fn func()) {
	if fn != nil {
		s.fns = append(s.fns, fn)
	}
}

// Clean runs every action, the last added first, and empties the stack, so a second Clean runs
// nothing. Deferred at the top of a build (`defer c.Clean()`), it undoes the build unless Release
// came first.
func (s *Stack) Clean() {
	for i := len(s.fns) - 1; i >= 0; i-- {
		s.fns[i]()
	}
	s.fns = nil
}

// Release forgets every action without running it: the build succeeded and its resources now
// belong to what was built. It returns the actions as one function (last added first), for the
// owner to run when it is done with them.
func (s *Stack) Release() func() {
	fns := s.fns
	s.fns = nil
	return func() {
		for i := len(fns) - 1; i >= 0; i-- {
			fns[i]()
		}
	}
}
