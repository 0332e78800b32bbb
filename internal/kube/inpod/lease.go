package inpod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// The run's lease (kubepod's package comment): a pod must not outlive the cordon that started it by
// more than a lease, or an agent whose cordon was killed would run on unwatched, with egress and the
// credentials in the gateway, until somebody ran cordon gc. The gateway is the lease's keeper because
// it is out of the agent's reach (another uid, another container) and because stopping it stops
// egress whatever the agent does; the wrapper's stop is the courtesy that saves the agent's work.

// Lease is `cordon kube lease`, which cordon execs into the gateway's container for as long as the
// run lasts: every read from r (cordon's heartbeat) renews the lease by touching dir/LeaseFile. It
// returns nil when r ends (cordon closed the exec, or the stream broke: the gateway's clock then
// decides).
func Lease(r io.Reader, dir string) error {
	path := filepath.Join(dir, kubepod.LeaseFile)
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if rerr := renew(path); rerr != nil {
				return fmt.Errorf("lease: renewing %s: %w", path, rerr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lease: reading cordon's heartbeat: %w", err)
		}
	}
}

// renew sets path's modification time to now, making the file when it is not there yet.
func renew(path string) error {
	now := time.Now()
	err := os.Chtimes(path, now, now)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// Stopped returns the reason in dir/StopFile and true once the gateway has stopped the run (its
// lease lapsed).
func Stopped(dir string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, kubepod.StopFile))
	if err != nil {
		return "", false
	}
	reason := strings.TrimSpace(string(b))
	if reason == "" {
		reason = "the run's lease lapsed"
	}
	return reason, true
}

// leaseLapsed reports, for a lease of lease (none when zero), whether the last renewal in dir is a
// lease old or older, by the wall clock: what a gateway that starts again finds when its run's cordon
// stopped renewing while it was down.
func leaseLapsed(dir string, lease time.Duration) (string, bool) {
	if lease <= 0 {
		return "", false
	}
	fi, err := os.Stat(filepath.Join(dir, kubepod.LeaseFile))
	if err != nil {
		return "", false // never renewed: the lease counts from this start (watchLease)
	}
	if age := time.Since(fi.ModTime()); age >= lease {
		return fmt.Sprintf("no heartbeat from cordon for %s (the lease is %s), found as the gateway started again: the run was stopped with its changes kept",
			age.Round(time.Second), lease), true
	}
	return "", false
}

// leaseCheck is how often the gateway looks at the lease: a tenth of it, at most a second, so that
// a lapse is acted on within a few percent of the lease's length.
func leaseCheck(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

// watchLease returns a channel that gets the reason once the lease in dir has gone unrenewed for
// lease, counted from the last renewal it saw, or from the call (less the age of a renewal made
// before it). A renewal is a change of LeaseFile's
// modification time; the time between renewals is this process's own monotonic clock, so the node's
// wall clock stepping does not end a lease or stretch it.
func watchLease(ctx context.Context, dir string, lease time.Duration) <-chan string {
	lapsed := make(chan string, 1)
	path := filepath.Join(dir, kubepod.LeaseFile)
	go func() {
		var seen time.Time
		renewed := time.Now()
		if fi, err := os.Stat(path); err == nil {
			// A renewal from before this process (the sidecar restarted) counts from when it was
			// made, by the wall clock this once: a gateway that restarts after cordon died must not
			// get a fresh lease each time.
			seen = fi.ModTime()
			if age := time.Since(seen); age > 0 {
				renewed = renewed.Add(-min(age, lease))
			}
		}
		tick := time.NewTicker(leaseCheck(lease))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if fi, err := os.Stat(path); err == nil && !fi.ModTime().Equal(seen) {
				seen, renewed = fi.ModTime(), time.Now()
				continue
			}
			if since := time.Since(renewed); since >= lease {
				lapsed <- fmt.Sprintf("no heartbeat from cordon for %s (the lease is %s): cordon ended the run at its timeout, was stopped, or lost the cluster, so the run was stopped with its changes kept",
					since.Round(time.Second), lease)
				return
			}
		}
	}()
	return lapsed
}

// stopRun records that the lease lapsed: dir/StopFile, which the wrapper watches and a restarted
// gateway obeys.
func stopRun(dir, reason string) error {
	if err := atomicfile.Write(filepath.Join(dir, kubepod.StopFile), []byte(reason+"\n"), 0o644); err != nil {
		return fmt.Errorf("gateway: recording the lapsed lease: %w", err)
	}
	return nil
}
