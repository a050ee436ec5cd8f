// Command kubecheck renders kustomizations of sheba's Kubernetes manifests
// and checks them offline, without a cluster (docs/deployment.md):
//
//   - every object decodes strictly into the k8s.io/api type of its kind
//     (an unknown field, a wrong type or a kind it does not know is an
//     error), and passes the API server's own rules that matter here
//     (names, labels, port names, a selector that matches its template);
//   - what no schema can say: probe ports exist on the container and sheba
//     listens there, in the protocol the probe speaks (with TLS on, no
//     plaintext probe of a business port, nor one without a client
//     certificate when those are required; none in TLS to the operator
//     port); the ConfigMap's config file is accepted by `sheba config
//     check` with the pod's environment (Secret values and TLS files stood
//     in); the TLS files are keys of a Secret volume mounted whole (so a
//     renewal reaches sheba) that sheba's user can read; a Service does
//     not tell proxies a TLS port is plaintext; the ports sheba listens on
//     (operator.addr too) are the container's;
//     terminationGracePeriodSeconds outlasts shutdown.timeout; the drain
//     delay outlasts the readiness probe's failure window; the Service, the
//     PodDisruptionBudget and the HPA reach the Deployment's pods; the
//     migration Job runs `migrate up` on the same image; every container
//     runs as non-root on a read-only root with no capabilities and has
//     requests and limits; paging.secret comes from a Secret, required;
//     no config file or variable holds the development key's hash; a
//     NetworkPolicy selects the pods, lets ingress reach their ports and
//     egress reach no cloud metadata address.
//
// Usage, from the repository's root (make deploy-check does this):
//
//	go run ./deploy/kubecheck -sheba bin/sheba deploy/kubernetes [DIR...]
//
// It prints what it checked and exits 0, or prints every problem and
// exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := checker{}
	fs.StringVar(&c.sheba, "sheba", "bin/sheba", "the sheba binary that checks the config file")
	fs.StringVar(&c.modfile, "modfile", "tools/go.mod", "the go.mod that pins kustomize")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: kubecheck [-sheba FILE] [-modfile FILE] KUSTOMIZATION_DIR...")
		return 2
	}
	failed := false
	for _, dir := range fs.Args() {
		summary, problems, err := c.checkDir(ctx, dir)
		if err != nil {
			fmt.Fprintf(stderr, "kubecheck: %s: %v\n", dir, err)
			failed = true
			continue
		}
		if len(problems) > 0 {
			noun := "problems"
			if len(problems) == 1 {
				noun = "problem"
			}
			fmt.Fprintf(stderr, "kubecheck: %s: %d %s:\n", dir, len(problems), noun)
			for _, p := range problems {
				fmt.Fprintf(stderr, "  - %s\n", p)
			}
			failed = true
			continue
		}
		fmt.Fprintf(stdout, "kubecheck: %s: ok\n", dir)
		for _, line := range summary {
			fmt.Fprintf(stdout, "  %s\n", line)
		}
	}
	if failed {
		return 1
	}
	return 0
}
