// Package hostname is the one definition of a host name that cordon's egress layers agree on: the DNS
// server, the name mapper, the SNI reader and the proxy's request parser must all accept and refuse
// exactly the same strings, or a name one layer normalises differently from another becomes a way
// around the policy.
package hostname

import (
	"errors"
	"fmt"
)

// Normalize returns name lower-case (ASCII only) without one trailing dot, if it is a plain host name:
// labels of 1 to 63 bytes of ASCII letters, digits, '-' and '_', 253 bytes in all. Anything else (an
// escaped byte, a wildcard, an empty label, non-ASCII) is refused: it is never a name the policy could
// allow, and must not be folded into one (strings.ToLower would turn the Kelvin sign into "k").
func Normalize(name string) (string, error) {
	b := []byte(name)
	if len(b) > 0 && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 253 {
		return "", fmt.Errorf("%q is not a host name (length)", name)
	}
	label := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.' && label > 0:
			label = 0
			continue
		default:
			return "", fmt.Errorf("%q is not a host name (byte 0x%02x)", name, c)
		}
		if label++; label > 63 {
			return "", fmt.Errorf("%q is not a host name (label longer than 63 bytes)", name)
		}
	}
	if label == 0 {
		return "", fmt.Errorf("%q is not a host name (empty label)", name)
	}
	return string(b), nil
}

// Check accepts s only if it is already in the form Normalize returns: lower-case, no trailing dot.
func Check(s string) error {
	n, err := Normalize(s)
	if err != nil {
		return err
	}
	if n != s {
		return errors.New("not lower-case, or ends with a dot")
	}
	return nil
}
