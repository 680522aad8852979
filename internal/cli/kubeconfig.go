package cli

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeOptions say how to reach the API server.
type kubeOptions struct {
	kubeconfig string
	qps        float32
	burst      int
}

func (o *kubeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "",
		"Path to a kubeconfig file. Default: in-cluster credentials inside a pod, else $KUBECONFIG or ~/.kube/config.")
	fs.Float32Var(&o.qps, "kube-api-qps", 50, "Client-side limit on requests per second to the Kubernetes API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Client-side burst of requests to the Kubernetes API server.")
}

// config loads the REST config the flags describe.
func (o *kubeOptions) config() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	cfg.UserAgent = "tollgate"
	return cfg, nil
}
