// Package creds keeps credentials out of the sandbox: the agent holds
// placeholders, and cordon's gateway, outside the sandbox, swaps the real
// value in only on requests to the hosts a credential is bound to, and only
// in the places its policy allows.
//
// # Use
//
//	set, err := creds.Prepare(ctx, specs) // before the sandbox starts; fails closed
//	env = append(env, set.Env()...)       // NAME=placeholder for the agent
//	intercept.Config{Hosts: set.Hosts(), Modify: set.Modify, ...}
//	defer set.Close(ctx)                  // revokes what sources minted
//
// Sources are pluggable through [Source]: the operator's environment
// ([FromEnv]), a file readable by its owner only ([FromFile]), a command run
// outside the sandbox like a git credential helper ([FromCommand]), and
// minting sources such as a GitHub App installation token (another
// package). AWS key pairs ([Spec].AWS) are not substituted but re-signed:
// see package awssig.
//
// # Placeholders
//
// A placeholder imitates its real value's format (known prefix such as
// "ghp_" or "sk-ant-api03-", length, separators, alphabet) so that tools
// checking the format accept it, but its characters are random (at least 128
// bits): it is worthless outside this run. It stays the same for the run
// while a refreshing source's real value changes.
//
// # Where a real value may go
//
// On a request to a host matching one of its Inject.Hosts ("name" exactly,
// or "*.name" for any subdomain of name), a credential's placeholder is
// replaced in: the named header (Inject.Header, anywhere in its values);
// for SchemeBearer, "Authorization: Bearer X" or "token X", and the Basic
// form below (git over HTTPS sends a token that way); for SchemeBasic,
// the user name or password inside "Authorization: Basic base64(user:pass)"
// (decoded, replaced, encoded again; the form git uses over HTTPS); and, if
// Inject.Body, the body up to MaxBodyBytes unless content-encoded.
//
// Only over TLS, and not in pieces: Modify injects only when r.URL.Scheme is
// "https" (the interceptor's request to an upstream whose certificate it
// verifies); a request that would carry a value in cleartext is refused
// (DetailCleartext). So is one asking for part of an answer (Range,
// If-Range) unless Inject.Ranges (DetailRange): an echo returned in pieces
// would escape redaction.
//
// Any placeholder found anywhere else (another header or host, the URL,
// decoded Basic credentials, a body that was read) is left as it is and
// reported under DetailMisuse. Only requests the gateway intercepts reach
// Modify: a placeholder sent to a host that is not intercepted goes out
// unseen, harmlessly, since it is worthless. Trailers are not searched.
//
// Real values live only in this process: [Secret], awssig.Keys and [Set]
// redact themselves in fmt, JSON and slog output, and no error or audit
// detail carries a value.
package creds
