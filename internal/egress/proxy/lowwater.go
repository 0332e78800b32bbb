package proxy

import (
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Batched reads of a bulk body. A relay that keeps up with its sender is woken by the poller for
// every few segments the sender writes: through the gateway, a 1 GiB download was read in 5,000 to
// 11,000 reads of 100–200 KiB, most after a wake-up of their own, where the benchmark's plain
// relay, whose writes happened to wait on its reader, made 1,250 reads. Raising the socket's
// receive low-water mark (SO_RCVLOWAT) while a body of known length flows makes the kernel signal
// it readable only once a batch is queued (or the window is nearly full, or the stream ended):
// bench/RESULTS.md, "Batched reads of a bulk body".
const (
	// batchSize is the most a relay waits for, a quarter of the large buffer. The mark is also kept
	// at a quarter of the socket's receive buffer at most: for a mark that the buffer cannot hold,
	// tcp_set_rcvlowat grows the buffer and clamps the advertised window to the mark, which would
	// cap a long-distance transfer's rate; under the cap, the kernel's autotuning is left alone.
	batchSize = 1 << 20
	// batchHold bounds how long queued bytes wait for the batch to fill: a sender that slows down
	// (or pauses mid-body) has what it sent relayed after this, never after the batch.
	batchHold = 2 * time.Millisecond
)

// lowWater is one relay's receive low-water mark on its source. Only the relay's goroutine raises
// the mark; a timer armed while the relay waits lowers it back to one byte after the hold, which
// also wakes the relay for what is queued (setting the mark runs the socket's data-ready check).
type lowWater struct {
	rc      syscall.RawConn
	mark    int         // the mark as the relay last set it; 1 is the kernel's default
	lowered atomic.Bool // the timer set the socket's mark back to 1 since the relay last set it
	hold    time.Duration
	timer   *time.Timer
}

// raise sets the mark to want bytes (at least 1, at most a quarter of the receive buffer) unless
// it is set so already. fd is the source's descriptor, passed by the relay from inside its own
// RawConn call.
func (w *lowWater) raise(fd uintptr, want int) {
	if w.lowered.Swap(false) {
		w.mark = 1
	}
	if want > w.mark {
		rcvbuf, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			return
		}
		want = min(want, rcvbuf/4)
	}
	want = max(want, 1)
	if want == w.mark {
		return
	}
	if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) == nil {
		w.mark = want
	}
}

// waiting is called as the relay is about to wait for its source: with a raised mark, the timer
// is armed so that the wait ends after the hold with whatever has arrived by then.
func (w *lowWater) waiting() {
	if w.mark <= 1 {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.hold, w.lower)
		return
	}
	w.timer.Reset(w.hold)
}

// woke is called when the relay's wait for its source ended.
func (w *lowWater) woke() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// lower sets the socket's mark back to one byte (the timer's function). The RawConn call fails
// once the connection is closed, so it never touches a descriptor number used again.
func (w *lowWater) lower() {
	_ = w.rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	w.lowered.Store(true)
}

// done leaves the socket as the relay found it, for whoever reads it next (a kept-alive
// connection's next response head is read a byte at a time by its framing).
func (w *lowWater) done() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.mark > 1 {
		w.lower()
	}
}
