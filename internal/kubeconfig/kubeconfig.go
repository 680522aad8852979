// Package kubeconfig says how the controller and the gateway reach the
// Kubernetes API server: one set of flags, one REST config.
package kubeconfig

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options say how to reach the API server.
type Options struct {
	// Path is a kubeconfig file; "" uses in-cluster credentials, else
	// $KUBECONFIG or ~/.kube/config.
	Path string
	// QPS and Burst are the client-side rate limit of API requests.
	QPS   float32
	Burst int
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Path, "kubeconfig", "",
		"Path to a kubeconfig file. Default: in-cluster credentials inside a pod, else $KUBECONFIG or ~/.kube/config.")
	fs.Float32Var(&o.QPS, "kube-api-qps", 50, "Client-side limit on requests per second to the Kubernetes API server.")
	fs.IntVar(&o.Burst, "kube-api-burst", 100, "Client-side burst of requests to the Kubernetes API server.")
}

// Config loads the REST config the options describe; userAgent names the
// component in the API server's logs.
func (o *Options) Config(userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Path != "" {
		rules.ExplicitPath = o.Path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg.UserAgent = userAgent
	return cfg, nil
}
