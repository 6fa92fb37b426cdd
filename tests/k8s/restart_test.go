package k8s

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Issue 40: a restart while the rebuild of a corrupt checkpoint waited for
// the API server came up ready with no claims and never rebuilt. The
// daemon is restarted twice with the API server away (its connections
// refused): each start reports the rebuild pending, keeps its marker and
// fails its reconciles (never ready); with the API server back the claims
// are rebuilt, prepared with the names they had, and the node is ready.
func TestAPendingRebuildSurvivesRestarts(t *testing.T) {
	var p *proxy
	api, h, d := newNodeVia(t, func(kc string) string {
		p = startProxy(t, kc)
		return p.kubeconfig(t, kc)
	})
	waitPool(t, api, "three devices", func(v poolView) bool { return len(v) == 3 }, d)
	k := register(t, h.registrarDir, driverName)
	tmpl := manifest[resourceapi.ResourceClaimTemplate](t, "claim-example.yaml", "ResourceClaimTemplate")
	claims := []*resourceapi.ResourceClaim{
		allocate(t, api, mustCreate(t, api, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fixed"}, Spec: tmpl.Spec.Spec})),
		allocate(t, api, mustCreate(t, api, sizedClaim(t, "share", "30Gi", ""))),
	}
	answers := map[string][]string{}
	for _, c := range claims {
		names, perr := k.prepare(c)
		if perr != "" {
			t.Fatalf("prepare %s: %s", c.Name, perr)
		}
		answers[c.Name] = names
	}

	d.Kill(t)
	cp := filepath.Join(h.pluginDir, "checkpoint.json")
	b, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, b[:len(b)/3], 0o600); err != nil {
		t.Fatal(err)
	}
	p.setUp(false)
	for restart, says := range []string{"the DRA checkpoint is corrupt", "the DRA checkpoint's rebuild is not done yet"} {
		d = h.start(t)
		addr := d.listenAddress(t)
		eventually(t, fmt.Sprintf("start %d: a reconcile failed for the rebuild", restart), func() (bool, string) {
			st, err := statusOf(addr)
			return err == nil && strings.Contains(st.LastError, "rebuilding the DRA checkpoint"), d.Output()
		})
		if st, _ := statusOf(addr); st.Ready {
			t.Errorf("start %d: ready with the claims still to rebuild", restart)
		}
		if !strings.Contains(d.Output(), says) {
			t.Errorf("start %d does not say %q", restart, says)
		}
		// (The kubelet's prepare reads the claim from the API server before
		// it reaches the plugin: with the server away it fails there.)
		if _, err := os.Stat(cp + ".rebuild"); err != nil {
			t.Errorf("start %d: the rebuild marker: %v", restart, err)
		}
		d.Kill(t)
	}

	p.setUp(true)
	d = h.start(t)
	addr := d.listenAddress(t)
	k = register(t, h.registrarDir, driverName)
	for _, c := range claims {
		eventually(t, "claim "+c.Name+" prepared as before", func() (bool, string) {
			names, perr := k.prepare(c)
			if perr != "" && !strings.Contains(perr, "being rebuilt") {
				t.Fatalf("prepare %s after the rebuild: %s", c.Name, perr)
			}
			return perr == "" && slices.Equal(names, answers[c.Name]), fmt.Sprint(names, perr)
		})
	}
	eventually(t, "ready after the rebuild", func() (bool, string) {
		st, err := statusOf(addr)
		return err == nil && st.Ready, st.LastError
	})
	if _, err := os.Stat(cp + ".rebuild"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rebuild marker outlives the rebuild: %v", err)
	}
}

// proxy is a TCP proxy in front of the API server: while down, every
// connection is closed at once, as a node sees an API server that is
// away.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	up     bool
}

// startProxy listens on loopback for kubeconfig's server until t ends.
func startProxy(t *testing.T, kubeconfig string) *proxy {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	server := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(server, "https://"), up: true}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.serve(c) }()
		}
	}()
	return p
}

func (p *proxy) setUp(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
}

func (p *proxy) serve(c net.Conn) {
	defer c.Close()
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	if !up {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// kubeconfig is kubeconfig pointed at the proxy (the API server's
// certificate names 127.0.0.1, where the proxy listens too).
func (p *proxy) kubeconfig(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.ln.Addr().String()
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}
