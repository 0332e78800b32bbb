package policy

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// ByteSize is an amount of memory or disk in bytes. It is written in a policy as an integer number of
// bytes or with a unit, so that limits read the way people think of them.
type ByteSize int64

// The binary units, for readability where sizes are spelled out.
const (
	KiB ByteSize = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// byteUnits maps every accepted suffix to its multiplier. K, M, G and T are binary, as in most tools
// that take memory limits; the two-letter KB, MB, GB and TB are decimal.
func byteUnits(suffix string) (int64, bool) {
	switch suffix {
	case "", "B":
		return 1, true
	case "K", "KiB":
		return int64(KiB), true
	case "M", "MiB":
		return int64(MiB), true
	case "G", "GiB":
		return int64(GiB), true
	case "T", "TiB":
		return int64(TiB), true
	case "KB":
		return 1e3, true
	case "MB":
		return 1e6, true
	case "GB":
		return 1e9, true
	case "TB":
		return 1e12, true
	}
	return 0, false
}

// ParseByteSize reads a size such as "512MiB", "2GiB", "1G" or "1000000". The number is a non-negative
// integer; a space before the unit is allowed.
func ParseByteSize(s string) (ByteSize, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("missing number")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, errors.New("number out of range")
	}
	mult, ok := byteUnits(strings.TrimPrefix(s[i:], " "))
	if !ok {
		return 0, errors.New("unknown unit")
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("number out of range")
	}
	return ByteSize(n * mult), nil
}

// String writes the size with the largest binary unit that represents it exactly, so that Render
// produces what a person would have written and ParseByteSize reads it back unchanged.
func (b ByteSize) String() string {
	for _, u := range []struct {
		size ByteSize
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
