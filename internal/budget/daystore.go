package budget

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
)

// DayStore keeps the per:day totals of one policy file, per host and UTC day, in a directory of
// cordon's state. Every Record rewrites the day's file atomically and fsyncs it before returning,
// so a cordon killed right after keeps the answer counted; a file lock around each
// read-modify-write keeps concurrent runs of the same policy file from losing each other's updates.
type DayStore struct {
	dir    string
	key    string // hex sha256 of the policy file's absolute path
	policy string
	now    func() time.Time
}

// dayFile is a day's file.
type dayFile struct {
	Policy string            `json:"policy"`
	Day    string            `json:"day"`
	Hosts  map[string]Totals `json:"hosts"`
}

// OpenDayStore opens the store of policyPath under dir, making dir (0700) if needed.
func OpenDayStore(dir, policyPath string) (*DayStore, error) {
	abs, err := filepath.Abs(policyPath)
	if err != nil {
		return nil, fmt.Errorf("budget: day totals of %s: %w", policyPath, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("budget: day totals: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	return &DayStore{dir: dir, key: hex.EncodeToString(sum[:16]), policy: abs, now: time.Now}, nil
}

// Today is the day's totals per host (UTC), across all runs of the policy file.
func (d *DayStore) Today() (map[string]Totals, error) {
	t, _, err := d.today()
	return t, err
}

func (d *DayStore) date() string { return d.now().UTC().Format(time.DateOnly) }

func (d *DayStore) path(day string) string {
	return filepath.Join(d.dir, d.key+"-"+day+".json")
}

// today reads the day's file; it needs no lock, as files are only ever replaced whole.
func (d *DayStore) today() (map[string]Totals, string, error) {
	day := d.date()
	f, err := d.read(day)
	if err != nil {
		return nil, "", err
	}
	return f.Hosts, day, nil
}

func (d *DayStore) read(day string) (*dayFile, error) {
	f := &dayFile{Policy: d.policy, Day: day, Hosts: map[string]Totals{}}
	b, err := os.ReadFile(d.path(day))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("day totals: %w", err)
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("day totals %s: %w", d.path(day), err)
	}
	if f.Hosts == nil {
		f.Hosts = map[string]Totals{}
	}
	return f, nil
}

// add counts one answer on host in today's file, durably, under the store's lock.
func (d *DayStore) add(host string, u Usage, p Prices) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	day := d.date()
	f, err := d.read(day)
	if err != nil {
		return err
	}
	t := f.Hosts[host]
	t.add(u, p)
	f.Hosts[host] = t
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("day totals: %w", err)
	}
	if err := atomicfile.Write(d.path(day), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("day totals: %w", err)
	}
	return nil
}

// lock takes the store's exclusive lock (one lock file per policy file, whatever the day).
func (d *DayStore) lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(d.dir, d.key+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("day totals: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("day totals: lock: %w", err)
	}
	return func() { f.Close() }, nil
}
