// Package starttrace timestamps the steps of a sandbox's start, in cordon and in the sandbox's
// init, for bench/timeline. A start is ~14 ms of work split between two processes, and perf trace
// adds ~25 µs to every traced system call, which hides where the time goes; the steps' own clock
// does not. It is compiled in only with the build tag cordontrace: in every other build Mark is an
// empty function, so the marks cost nothing and nothing is ever printed.
//
//	CGO_ENABLED=0 go build -tags cordontrace -o bin/cordon-trace ./cmd/cordon
//	go run ./bench/timeline -cordon bin/cordon-trace -n 40
package starttrace

// Prefix starts every line Mark prints: "cordon-trace <monotonic seconds> <pid> <step>".
const Prefix = "cordon-trace"
