package policy

import (
	"math"
	"time"

	"go.yaml.in/yaml/v3"
)

// The limits section: resource caps on the sandbox.

// Limits bound what the sandbox may consume. Zero means no limit.
type Limits struct {
	Memory    ByteSize
	Pids      int64
	CPU       float64 // CPUs' worth of time: 1.5 is one and a half cores
	Timeout   time.Duration
	OpenFiles uint64
	Disk      ByteSize
}

func (d *decoder) limits(n *yaml.Node, path string) (l Limits, err error) {
	_, err = d.mapping(n, path,
		field{"memory", func(v *yaml.Node, p string) (err error) {
			l.Memory, err = d.size(v, p)
			return err
		}},
		field{"pids", func(v *yaml.Node, p string) (err error) {
			l.Pids, err = d.integer(v, p, 1, math.MaxInt64)
			return err
		}},
		field{"cpu", func(v *yaml.Node, p string) error {
			var f float64
			tag := v.ShortTag()
			if v.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!float" || v.Decode(&f) != nil ||
				math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
				return d.errf(v, p, "%s is not a number of CPUs (expected a positive number such as 1 or 1.5)", describe(v))
			}
			l.CPU = f
			return nil
		}},
		field{"timeout", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			t, err := time.ParseDuration(s)
			if err != nil || t <= 0 {
				return d.errf(v, p, "%q is not a duration (expected a positive duration such as 30m, 2h or 1h30m)", s)
			}
			l.Timeout = t
			return nil
		}},
		field{"openFiles", func(v *yaml.Node, p string) error {
			i, err := d.integer(v, p, 1, math.MaxInt64)
			l.OpenFiles = uint64(i)
			return err
		}},
		field{"disk", func(v *yaml.Node, p string) (err error) {
			l.Disk, err = d.size(v, p)
			return err
		}},
	)
	return l, err
}

func (d *decoder) size(n *yaml.Node, path string) (ByteSize, error) {
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!str" {
		return 0, d.errf(n, path, "%s is not a size (expected e.g. 512MiB, 2GiB, 1000000)", describe(n))
	}
	b, err := ParseByteSize(n.Value)
	if err != nil {
		return 0, d.errf(n, path, "%q is not a size (expected e.g. 512MiB, 2GiB, 1000000)", n.Value)
	}
	if b == 0 {
		return 0, d.errf(n, path, "must be positive (leave it out for no limit)")
	}
	return b, nil
}
