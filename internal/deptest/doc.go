// Package deptest pins which way cordon's imports flow, in the manner of Tailscale's tstest/deptest.
// Its tests list, per package, the imports that are forbidden and why (policy is data and knows
// nothing of the gateway; the box knows nothing of the gateway; the gateway knows no backend; the
// leaves import nothing of cordon; nothing imports the CLI), and compare the third-party modules
// linked into the cordon binary with a reviewed list in testdata, so that a new dependency of a
// security tool is a change someone read. The package has no code of its own: it exists for its
// tests, which shell out to `go list`.
package deptest
