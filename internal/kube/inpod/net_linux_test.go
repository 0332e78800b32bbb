//go:build linux

package inpod

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/netns"
)

// The setup step falls back to xtables only when nft says the network stack has no nf_tables at
// all (netns.ErrNoNFTables, as nft's error wraps it), never for any other failure of nft, and a
// failing fallback is the step's failure with both reasons. The errors are the ones netns returns.
func TestInstallPodFallsBackOnlyWithoutNFTables(t *testing.T) {
	noNFT := fmt.Errorf("netns: install the pod's rules: %w: netlink to nf_tables: %w", netns.ErrNoNFTables, unix.EPROTONOSUPPORT)
	otherNFT := fmt.Errorf("netns: install the pod's rules: netlink to nf_tables: %w", unix.EPERM)
	xtFails := errors.New("netns: install the pod's xtables rules: IPv4: raw socket: operation not permitted")
	cases := []struct {
		name      string
		nft, xt   error
		how       string
		xtCalled  bool
		wantErr   []string // parts of the error; none means success
		wantWhy   bool
		wantNoNFT bool
	}{
		{name: "nftables", how: "nftables"},
		{name: "no nf_tables", nft: noNFT, how: "xtables", xtCalled: true, wantWhy: true},
		{name: "nf_tables that refuses", nft: otherNFT, wantErr: []string{"operation not permitted"}},
		{name: "no nf_tables, and xtables fails", nft: noNFT, xt: xtFails, xtCalled: true,
			wantErr: []string{"protocol not supported", "raw socket: operation not permitted"}, wantNoNFT: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			called := false
			nft := func(p sandbox.EgressPorts, uid uint32) error {
				if p != kubepod.Ports() || uid != kubepod.GatewayUID {
					t.Errorf("nft got %+v, %d", p, uid)
				}
				return c.nft
			}
			xt := func(p sandbox.EgressPorts, uid uint32) error {
				called = true
				if p != kubepod.Ports() || uid != kubepod.GatewayUID {
					t.Errorf("xt got %+v, %d", p, uid)
				}
				return c.xt
			}
			how, why, err := installPodWith(kubepod.Ports(), kubepod.GatewayUID, nft, xt)
			if called != c.xtCalled {
				t.Errorf("xtables tried: %v, want %v", called, c.xtCalled)
			}
			if len(c.wantErr) == 0 {
				if err != nil || how != c.how {
					t.Fatalf("installPodWith = %q, %v, want %q", how, err, c.how)
				}
			} else {
				if err == nil {
					t.Fatalf("installPodWith = %q, nil, want an error", how)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if errors.Is(err, netns.ErrNoNFTables) != c.wantNoNFT {
					t.Errorf("error %q wraps ErrNoNFTables: %v, want %v", err, !c.wantNoNFT, c.wantNoNFT)
				}
			}
			if (why != nil) != c.wantWhy || (why != nil && !errors.Is(why, netns.ErrNoNFTables)) {
				t.Errorf("why = %v, want nft's ErrNoNFTables: %v", why, c.wantWhy)
			}
		})
	}
}
