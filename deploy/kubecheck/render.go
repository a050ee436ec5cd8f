package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// checker renders and checks kustomizations.
type checker struct {
	sheba   string // path of the sheba binary
	modfile string // go.mod that pins kustomize as a tool
}

// render runs `kustomize build dir` with the kustomize pinned in c.modfile
// and returns its output.
func (c checker) render(ctx context.Context, dir string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "-modfile="+c.modfile, "kustomize", "build", dir)
	// The tools module is kept out of any workspace, as the Makefile does.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// objects is a rendered kustomization, each object decoded into its type.
type objects struct {
	all         []object
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	jobs        []*batchv1.Job
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	accounts    []*corev1.ServiceAccount
	netpols     []*networkingv1.NetworkPolicy
}

// object names one rendered object.
type object struct{ kind, name string }

func (o object) String() string { return o.kind + " " + o.name }

// kinds maps apiVersion and kind to a new value of the Go type the API
// server decodes them into. A kind missing here is an error rather than
// passed unchecked: add its type when a manifest gains one.
var kinds = map[[2]string]func() any{
	{"apps/v1", "Deployment"}:                     func() any { return new(appsv1.Deployment) },
	{"v1", "Service"}:                             func() any { return new(corev1.Service) },
	{"v1", "ConfigMap"}:                           func() any { return new(corev1.ConfigMap) },
	{"v1", "ServiceAccount"}:                      func() any { return new(corev1.ServiceAccount) },
	{"batch/v1", "Job"}:                           func() any { return new(batchv1.Job) },
	{"policy/v1", "PodDisruptionBudget"}:          func() any { return new(policyv1.PodDisruptionBudget) },
	{"autoscaling/v2", "HorizontalPodAutoscaler"}: func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	{"networking.k8s.io/v1", "NetworkPolicy"}:     func() any { return new(networkingv1.NetworkPolicy) },
}

// decode splits the rendered YAML into objects and decodes each strictly:
// an unknown or duplicated field, or a value of the wrong type, is a
// problem, as it is for `kubectl apply --validate=strict`.
func decode(rendered []byte) (objects, []string, error) {
	var objs objects
	var problems []string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return objects{}, nil, fmt.Errorf("split rendered YAML: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			problems = append(problems, fmt.Sprintf("an object is not YAML: %v", err))
			continue
		}
		o := object{kind: head.Kind, name: head.Metadata.Name}
		newObj, ok := kinds[[2]string{head.APIVersion, head.Kind}]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: apiVersion %q kind %q is not one kubecheck knows: add its k8s.io/api type", o, head.APIVersion, head.Kind))
			continue
		}
		v := newObj()
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", o, err))
			continue
		}
		objs.all = append(objs.all, o)
		switch v := v.(type) {
		case *appsv1.Deployment:
			objs.deployments = append(objs.deployments, v)
		case *corev1.Service:
			objs.services = append(objs.services, v)
		case *corev1.ConfigMap:
			objs.configMaps = append(objs.configMaps, v)
		case *batchv1.Job:
			objs.jobs = append(objs.jobs, v)
		case *policyv1.PodDisruptionBudget:
			objs.pdbs = append(objs.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			objs.hpas = append(objs.hpas, v)
		case *corev1.ServiceAccount:
			objs.accounts = append(objs.accounts, v)
		case *networkingv1.NetworkPolicy:
			objs.netpols = append(objs.netpols, v)
		}
	}
	return objs, problems, nil
}
