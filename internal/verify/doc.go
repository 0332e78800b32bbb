// Package verify tests the boundary a user actually has: it plants canaries on the host, starts a
// real sandbox with the user's policy (through the cordon library, as cordon run does) whose command
// is the cordon binary's probe suite, and then settles from the host what the probes cannot judge
// from inside (did a planted file reach the project, does the workspace guard flag it, did the DNS
// canary see a query, did a credential variable hold the real value). The result is one scorecard.
//
// The cordon command's verify subcommand is flags around Run and the printing of its scorecard.
package verify
