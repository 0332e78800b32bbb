// Package gitpush reads what a git push asks for, so that the gateway can refuse a push by the refs it
// would change before any of it reaches the server. A smart-HTTP push is one POST to
// .../git-receive-pack whose body starts with the ref-update commands ("old-oid new-oid refname" as
// pkt-lines, the client's capabilities after a NUL, then a flush) and continues with the pack. Read
// parses that start exactly as git's receive-pack does, buffering at most MaxHead bytes, and refuses
// whatever receive-pack might read differently (signed pushes, malformed lines, unknown encodings);
// the caller forwards the whole body unchanged when the push is allowed. Refusal builds the answer
// receive-pack itself would give for rejected refs, in the format the client asked for, so that
// `git push` prints the reason. Classify tells the requests of git's smart-HTTP protocol apart by
// method and path.
//
// It imports nothing of cordon: the policy's rules reach it as plain values (Rule).
package gitpush
