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
// receive low-water mark (SO_RCVLOWAT) while a body or a passed-through stream flows in bulk makes
// the kernel signal it readable only once a batch is queued (or the window is nearly full, or the
// stream ended): bench/RESULTS.md, "Batched reads of a bulk body".
const (
	// batchSize is the most a relay waits for, a quarter of the large buffer. The mark is also kept
	// at a quarter of the socket's receive buffer at most: for a mark that the buffer cannot hold,
	// tcp_set_rcvlowat grows the buffer and clamps the advertised window to the mark, which would
	// cap a long-distance transfer's rate; under the cap, the kernel's autotuning is left alone.
	batchSize = 1 << 20
	// batchHold bounds how long queued bytes wait for the batch to fill: a sender that slows down
	// (or pauses mid-body) has what it sent relayed after this, never after the batch.
	batchHold = 2 * time.Millisecond
	// bulkRead is the least a read after a wait must bring for the flow to count as bulk: half a
	// loopback segment (a wake-up for one segment brings just under 64 KiB), far more than a wide-area
	// flow's wake-up brings (a few segments of 1,448 bytes).
	bulkRead = 32 << 10
)

// lowWater is one relay's receive low-water mark on its source. Only the relay's goroutine raises
// the mark; a timer armed while the relay waits lowers it back to one byte after the hold, which
// also wakes the relay for what is queued (setting the mark runs the socket's data-ready check).
type lowWater struct {
	rc syscall.RawConn
	// mark is the mark as the relay last set it; 1 stands for the kernel's default (an accepted
	// socket's reads 0, which the kernel takes as 1).
	mark    int
	waited  bool        // the next read follows a wait for the source (or is the first)
	lowered atomic.Bool // the timer set the socket's mark back to 1 since the relay last set it
	hold    time.Duration
	timer   *time.Timer
}

// newLowWater starts a relay's batching on its source, whose mark is the kernel's default.
func newLowWater(rc syscall.RawConn, hold time.Duration) *lowWater {
	return &lowWater{rc: rc, mark: 1, waited: true, hold: hold}
}

// read adjusts the mark after the relay read k bytes, full if they filled its buffer, left being
// the bytes still to come (-1 if unknown). A read that fills the buffer is a bulk flow the relay
// is behind. A read that follows a wait says how fast the source is: bulkRead or more, or a raised
// mark that filled before the hold ran out, is a bulk flow, and the mark goes (back) up to a batch;
// anything less is a slow or interactive flow, and the mark goes down to one byte until a bulk read
// comes again. So a stream that turns from bulk to small messages has one of them held, for the
// hold at most. The mark is never past what is left, so a body's tail is not held at all. fd is the
// source's descriptor, passed by the relay from inside its own RawConn call.
func (w *lowWater) read(fd uintptr, k int, full bool, left int64) {
	prev := w.mark
	timedOut := w.lowered.Swap(false)
	if timedOut {
		w.mark = 1
	}
	want := w.mark
	switch {
	case full:
		// The relay is behind a bulk flow: it will wait in batches once it has caught up.
		want = batchSize
	case w.waited:
		want = 1
		if k >= bulkRead || prev > 1 && !timedOut {
			want = batchSize
		}
	}
	w.waited = false
	if left >= 0 {
		want = int(min(int64(want), left))
	}
	w.set(fd, max(want, 1))
}

// set makes the socket's mark want bytes, at most a quarter of its receive buffer.
func (w *lowWater) set(fd uintptr, want int) {
	if want > w.mark {
		rcvbuf, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			return
		}
		want = max(min(want, rcvbuf/4), 1)
	}
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
	w.waited = true
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

// lower sets the socket's mark back to one byte (the timer's function). It says so before it
// does: the relay, woken by the change, must find the flag set when it reads, or it would take the
// read for a batch that filled. The RawConn call fails once the connection is closed, so it never
// touches a descriptor number used again.
func (w *lowWater) lower() {
	w.lowered.Store(true)
	_ = w.rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
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
