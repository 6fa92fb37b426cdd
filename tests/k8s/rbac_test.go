package k8s

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// deployRBAC creates deploy/kubernetes/rbac.yaml's objects and answers a
// kubeconfig holding a token of its service account: the daemon runs with
// the rights the deployment gives it, and no more (the API server
// authorizes with RBAC).
func deployRBAC(t *testing.T, api *apiServer) string {
	t.Helper()
	ctx := t.Context()
	c := api.client
	ns := manifest[corev1.Namespace](t, "rbac.yaml", "Namespace")
	sa := manifest[corev1.ServiceAccount](t, "rbac.yaml", "ServiceAccount")
	role := manifest[rbacv1.ClusterRole](t, "rbac.yaml", "ClusterRole")
	binding := manifest[rbacv1.ClusterRoleBinding](t, "rbac.yaml", "ClusterRoleBinding")
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of the daemon's service account: %v", err)
	}
	cfg := rest.AnonymousClientConfig(api.config)
	cfg.BearerToken = tok.Status.Token
	return writeKubeconfig(t, cfg)
}
