package creds

import (
	"strings"
	"testing"
)

// TestPlaceholderFormat: a placeholder keeps the real value's known prefix,
// length, structural separators and alphabet, and is otherwise random.
func TestPlaceholderFormat(t *testing.T) {
	tests := []struct {
		name, real, shape, prefix string
		alphabet                  string // every random character is in it
		length                    int    // 0: same as real
	}{
		{"anthropic", "sk-ant-api03-" + strings.Repeat("aB3_-", 19) + "xAA", "", "sk-ant-api03-", lowerChars + upperChars + digitChars + "-_", 0},
		{"github classic", "ghp_" + strings.Repeat("aZ09", 9), "", "ghp_", lowerChars + upperChars + digitChars, 0},
		{"github app", "ghs_" + strings.Repeat("Xy7", 12), "", "ghs_", lowerChars + upperChars + digitChars, 0},
		{"github fine-grained", "github_pat_11ABCDEFG0" + strings.Repeat("a1B", 10) + "_" + strings.Repeat("Zz9", 20), "", "github_pat_", lowerChars + upperChars + digitChars + "_", 0},
		{"slack", "xoxb-1234567890-1234567890123-" + strings.Repeat("aB1", 8), "", "xoxb-", lowerChars + upperChars + digitChars + "-", 0},
		{"hex", strings.Repeat("0123456789abcdef", 4), "", "", hexChars, 0},
		{"upper and digits", "AKIA" + "ABCDEFGHIJ234567", "", "AKIA", upperChars + digitChars, 4 + minRandomChars},
		{"short gets longer", "abc", "", "", lowerChars, minRandomChars},
		{"shape", "custom_" + strings.Repeat("q", 40), "custom_", "custom_", lowerChars, 0},
		{"shape the value lacks", "abcdef", "pre-", "pre-", lowerChars + digitChars, 4 + minRandomChars},
		{"dots kept", "aaaa.bbbb.cccc" + strings.Repeat("z", 30), "", "", lowerChars + ".", 0},
		{"base64 chars replaced", strings.Repeat("ab+/", 10) + "==", "", "", lowerChars + digitChars, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := placeholderFor(tt.real, tt.shape)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := placeholderFor(tt.real, tt.shape)
			if p == q || p == tt.real {
				t.Fatalf("placeholder not random: %q %q", p, q)
			}
			if !strings.HasPrefix(p, tt.prefix) {
				t.Fatalf("%q lacks prefix %q", p, tt.prefix)
			}
			want := tt.length
			if want == 0 {
				want = len(tt.real)
			}
			if len(p) != want {
				t.Fatalf("len(%q) = %d, want %d", p, len(p), want)
			}
			for _, c := range []byte(strings.TrimPrefix(p, tt.prefix)) {
				if !strings.ContainsRune(tt.alphabet, rune(c)) {
					t.Fatalf("%q has %q, outside %q", p, c, tt.alphabet)
				}
			}
			// Separators stay where the format puts them.
			rest := strings.TrimPrefix(tt.real, tt.prefix)
			prest := strings.TrimPrefix(p, tt.prefix)
			for i := range min(len(rest), len(prest)) {
				if structuredPrefixes[tt.prefix] && isSeparator(rest[i]) != isSeparator(prest[i]) {
					t.Fatalf("separator moved at %d: %q vs %q", i, tt.real, p)
				}
			}
		})
	}
}

// TestPlaceholderIndependent: where '-' and '_' are letters of the secret's
// alphabet, their places in the placeholder do not follow the real value's.
func TestPlaceholderIndependent(t *testing.T) {
	real := "sk-ant-api03-" + strings.Repeat("-", 40) + strings.Repeat("a", 40)
	p, err := placeholderFor(real, "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(strings.TrimPrefix(p, "sk-ant-api03-"), strings.Repeat("-", 40)) {
		t.Fatalf("placeholder copies the secret's '-' places: %q", p)
	}
}

// TestPlaceholderDots: '.' separates a token's parts (as in a JWT) and keeps
// its places.
func TestPlaceholderDots(t *testing.T) {
	p, err := placeholderFor("eyJhbGciOiJIUzI1NiJ9.eyJyb2xlIjoiYW5vbiJ9.c2lnbmF0dXJlc2lnbmF0dXJl", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 66 || p[20] != '.' || p[41] != '.' || strings.Count(p, ".") != 2 {
		t.Fatalf("dots moved: %q", p)
	}
}
