//go:build !linux

package cordon

// Init must be called first thing in main (and in TestMain) by every program that starts runs; on
// this platform, which has no backend, it does nothing.
func Init() {}
