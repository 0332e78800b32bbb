package scan

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
)

// The fake secrets of the tests are built at run time from split prefixes and seeded random bodies, so
// that the repository itself holds nothing a secret scanner would flag.

const (
	alnum   = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upperD  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b64     = alnum + "+/"
	lowerHx = "0123456789abcdef"
)

// gen makes random strings from a fixed seed: the same test always sees the same secrets.
type gen struct{ r *rand.Rand }

func newGen(seed uint64) *gen { return &gen{rand.New(rand.NewPCG(seed, 42))} }

func (g *gen) str(n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.r.IntN(len(alphabet))]
	}
	return string(b)
}

// p joins the parts of a prefix, which are kept apart in the source.
func p(parts ...string) string { return strings.Join(parts, "") }

func (g *gen) github() string      { return p("gh", "p_") + g.str(36, alnum) }
func (g *gen) githubOAuth() string { return p("gh", "o_") + g.str(36, alnum) }
func (g *gen) githubPAT() string {
	return p("github", "_pat_") + g.str(22, alnum) + "_" + g.str(59, alnum)
}
func (g *gen) gitlab() string { return p("gl", "pat-") + g.str(20, alnum) }
func (g *gen) slack() string {
	return p("xo", "xb-") + g.str(12, "0123456789") + "-" + g.str(24, alnum)
}
func (g *gen) anthropic() string { return p("sk-", "ant-api03-") + g.str(93, alnum+"-_") }
func (g *gen) openAIProj() string {
	return p("sk-", "proj-") + g.str(20, alnum) + "Ab3" + g.str(60, alnum)
}
func (g *gen) openAILegacy() string {
	return p("s", "k-") + g.str(20, alnum) + "Zq7" + g.str(25, alnum)
}
func (g *gen) stripe() string    { return p("sk", "_live_") + g.str(24, alnum) }
func (g *gen) awsKeyID() string  { return p("AK", "IA") + g.str(16, upperD) }
func (g *gen) awsSecret() string { return g.str(40, b64) }
func (g *gen) googleKey() string { return p("AI", "za") + g.str(35, alnum+"-_") }

// pem makes a PEM block of random base64 under label.
func (g *gen) pem(label string) string {
	body := base64.StdEncoding.EncodeToString([]byte(g.str(300, alnum)))
	var b strings.Builder
	b.WriteString(p("-----BEGIN ", label, "-----\n"))
	for len(body) > 64 {
		b.WriteString(body[:64] + "\n")
		body = body[64:]
	}
	b.WriteString(body + "\n" + p("-----END ", label, "-----\n"))
	return b.String()
}

func privateLabel(kind string) string { return strings.TrimSpace(kind + " PRIVATE" + " KEY") }
