// Package k8s tests mps-daemon's Kubernetes mode against real parts: a
// kube-apiserver built from the pinned k8s.io/kubernetes module with an
// embedded etcd, both started by the test; the scheduler's structured
// allocator; the kubelet's side of the plugin gRPC driven as the kubelet
// drives it; Podman consuming the CDI names the plugin answers with. It is
// its own module (its go.mod pins k8s.io/kubernetes and replaces its
// staging modules) so the daemon's module does not depend on Kubernetes'
// server code.
package k8s

import (
	"path"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// apiServer is a running kube-apiserver and an administrator's client.
type apiServer struct {
	client kubernetes.Interface
	config *rest.Config
}

// startAPIServer starts an embedded etcd and a kube-apiserver on it, both
// stopped when t ends.
func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	etcd := testserver.RunEtcd(t, nil)
	storage := storagebackend.NewDefaultConfig(path.Join(uuid.New().String(), "registry"), nil)
	storage.Transport.ServerList = etcd.Endpoints()
	srv, err := kubeapiservertesting.StartTestServer(t, kubeapiservertesting.NewDefaultTestServerOptions(), []string{
		// No endpoints reconciler (no real node IP), no service account
		// admission (no token controller runs).
		"--endpoint-reconciler-type=none",
		"--disable-admission-plugins=ServiceAccount",
		// The daemon gets the rights deploy/kubernetes/rbac.yaml gives.
		"--authorization-mode=RBAC",
	}, storage)
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(srv.TearDownFn)
	cfg := rest.CopyConfig(srv.ClientConfig)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{client: c, config: cfg}
}

// writeKubeconfig writes cfg's server and credentials as a kubeconfig.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{
		Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile,
		InsecureSkipTLSVerify: cfg.Insecure, TLSServerName: cfg.ServerName,
	}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}
