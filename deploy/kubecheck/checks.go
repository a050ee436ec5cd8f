package main

import (
	"context"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// report collects the problems found and, for a clean run, what was
// checked.
type report struct {
	problems []string
	summary  []string
}

func (r *report) problemf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *report) notef(format string, args ...any) {
	r.summary = append(r.summary, fmt.Sprintf(format, args...))
}

// checkDir renders the kustomization in dir and checks it. It returns an
// error only when the check could not run (kustomize failed); problems with
// the manifests are returned as problems.
func (c checker) checkDir(ctx context.Context, dir string) (summary, problems []string, err error) {
	rendered, err := c.render(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	objs, decodeProblems, err := decode(rendered)
	if err != nil {
		return nil, nil, err
	}
	r := &report{problems: decodeProblems}
	names := make([]string, len(objs.all))
	for i, o := range objs.all {
		names[i] = o.String()
	}
	r.notef("%d objects decoded strictly into k8s.io/api types: %s", len(objs.all), strings.Join(names, ", "))
	checkAPIRules(objs, r)
	// An object that did not decode is missing from objs: do not report it
	// missing a second time.
	c.checkSheba(ctx, objs, len(decodeProblems) == 0, r)
	return r.summary, r.problems, nil
}

// ---------------------------------------------------------------- API rules

// checkAPIRules applies the API server's validation rules that a strict
// decode does not cover and that these manifests could break.
func checkAPIRules(objs objects, r *report) {
	meta := func(kind string, m metav1.ObjectMeta, dns1035 bool) {
		o := object{kind, m.Name}
		nameErrs := validation.IsDNS1123Subdomain(m.Name)
		if dns1035 {
			nameErrs = validation.IsDNS1035Label(m.Name)
		}
		for _, e := range nameErrs {
			r.problemf("%s: metadata.name: %s", o, e)
		}
		for _, e := range metavalidation.ValidateLabels(m.Labels, field.NewPath("metadata", "labels")) {
			r.problemf("%s: %v", o, e)
		}
	}
	for _, d := range objs.deployments {
		o := object{"Deployment", d.Name}
		meta(o.kind, d.ObjectMeta, false)
		checkSelector(o, "spec.selector", d.Spec.Selector, d.Spec.Template.Labels, r)
		checkPodSpec(o, d.Spec.Template.Spec, r)
	}
	for _, j := range objs.jobs {
		o := object{"Job", j.Name}
		meta(o.kind, j.ObjectMeta, false)
		checkPodSpec(o, j.Spec.Template.Spec, r)
		if p := j.Spec.Template.Spec.RestartPolicy; p != corev1.RestartPolicyNever && p != corev1.RestartPolicyOnFailure {
			r.problemf("%s: spec.template.spec.restartPolicy must be Never or OnFailure, got %q", o, p)
		}
	}
	for _, s := range objs.services {
		o := object{"Service", s.Name}
		meta(o.kind, s.ObjectMeta, true)
		seen := map[string]bool{}
		for i, p := range s.Spec.Ports {
			at := fmt.Sprintf("%s: spec.ports[%d]", o, i)
			for _, e := range validation.IsValidPortNum(int(p.Port)) {
				r.problemf("%s.port: %s", at, e)
			}
			if len(s.Spec.Ports) > 1 && p.Name == "" {
				r.problemf("%s.name: must be set when a Service has several ports", at)
			}
			for _, e := range validation.IsDNS1123Label(p.Name) {
				if p.Name != "" {
					r.problemf("%s.name: %s", at, e)
				}
			}
			if seen[p.Name] {
				r.problemf("%s.name: %q is used twice", at, p.Name)
			}
			seen[p.Name] = true
		}
	}
	for _, c := range objs.configMaps {
		meta("ConfigMap", c.ObjectMeta, false)
		for k := range c.Data {
			for _, e := range validation.IsConfigMapKey(k) {
				r.problemf("ConfigMap %s: data key %q: %s", c.Name, k, e)
			}
		}
	}
	for _, a := range objs.accounts {
		meta("ServiceAccount", a.ObjectMeta, false)
	}
	for _, np := range objs.netpols {
		meta("NetworkPolicy", np.ObjectMeta, false)
		checkNetworkPolicyRules(np, r)
	}
	for _, p := range objs.pdbs {
		o := object{"PodDisruptionBudget", p.Name}
		meta(o.kind, p.ObjectMeta, false)
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			r.problemf("%s: set exactly one of spec.minAvailable and spec.maxUnavailable", o)
		}
	}
	for _, h := range objs.hpas {
		o := object{"HorizontalPodAutoscaler", h.Name}
		meta(o.kind, h.ObjectMeta, false)
		minR := int32(1)
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		if minR < 1 || h.Spec.MaxReplicas < minR {
			r.problemf("%s: want 1 <= spec.minReplicas (%d) <= spec.maxReplicas (%d)", o, minR, h.Spec.MaxReplicas)
		}
	}
}

// checkSelector checks that a workload's selector is set and matches its
// pod template's labels, as the API server requires.
func checkSelector(o object, at string, sel *metav1.LabelSelector, podLabels map[string]string, r *report) {
	s, err := selectorOf(sel)
	switch {
	case err != nil:
		r.problemf("%s: %s: %v", o, at, err)
	case s.Empty():
		r.problemf("%s: %s must not be empty", o, at)
	case !s.Matches(labels.Set(podLabels)):
		r.problemf("%s: %s does not match the pod template's labels %v", o, at, podLabels)
	}
}

func selectorOf(sel *metav1.LabelSelector) (labels.Selector, error) {
	if sel == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(sel)
}

// checkPodSpec checks what the API server checks of containers: names,
// images, ports, variable names, one handler per probe, mounts of declared
// volumes.
func checkPodSpec(o object, spec corev1.PodSpec, r *report) {
	if len(spec.Containers) == 0 {
		r.problemf("%s: the pod has no containers", o)
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for _, c := range spec.Containers {
		at := fmt.Sprintf("%s: container %q", o, c.Name)
		for _, e := range validation.IsDNS1123Label(c.Name) {
			r.problemf("%s: name: %s", at, e)
		}
		if c.Image == "" {
			r.problemf("%s: image must be set", at)
		}
		names := map[string]bool{}
		for _, p := range c.Ports {
			for _, e := range validation.IsValidPortNum(int(p.ContainerPort)) {
				r.problemf("%s: containerPort: %s", at, e)
			}
			if p.Name != "" {
				for _, e := range validation.IsValidPortName(p.Name) {
					r.problemf("%s: port name %q: %s", at, p.Name, e)
				}
				if names[p.Name] {
					r.problemf("%s: port name %q is used twice", at, p.Name)
				}
				names[p.Name] = true
			}
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				r.problemf("%s: env %q: %s", at, e.Name, msg)
			}
		}
		for kind, p := range probes(c) {
			if n := handlers(p.ProbeHandler); n != 1 {
				r.problemf("%s: %s must have exactly one handler (exec, httpGet, tcpSocket or grpc), has %d", at, kind, n)
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				r.problemf("%s: volumeMount %q names no volume of the pod", at, m.Name)
			}
		}
	}
}

// probes returns the probes the container has, by kind.
func probes(c corev1.Container) map[string]*corev1.Probe {
	m := map[string]*corev1.Probe{}
	for kind, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		if p != nil {
			m[kind] = p
		}
	}
	return m
}

func handlers(h corev1.ProbeHandler) int {
	n := 0
	for _, set := range []bool{h.Exec != nil, h.HTTPGet != nil, h.TCPSocket != nil, h.GRPC != nil} {
		if set {
			n++
		}
	}
	return n
}

// ---------------------------------------------------- what schemas cannot say

// checkSheba checks the manifests against how sheba behaves. complete
// says whether every rendered object decoded, so that a missing one is a
// problem of its own.
func (c checker) checkSheba(ctx context.Context, objs objects, complete bool, r *report) {
	for _, want := range []struct {
		kind string
		n    int
	}{
		{"Deployment", len(objs.deployments)},
		{"Service", len(objs.services)},
		{"Job", len(objs.jobs)},
		{"PodDisruptionBudget", len(objs.pdbs)},
		{"HorizontalPodAutoscaler", len(objs.hpas)},
	} {
		if want.n != 1 && (complete || want.n > 1) {
			r.problemf("want exactly one %s, found %d", want.kind, want.n)
		}
	}
	if len(objs.deployments) != 1 {
		return
	}
	d := objs.deployments[0]
	dep := object{"Deployment", d.Name}
	spec := d.Spec.Template.Spec
	podLabels := labels.Set(d.Spec.Template.Labels)
	ctr, ok := shebaContainer(spec)
	if !ok {
		r.problemf("%s: no container named sheba", dep)
		return
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		r.problemf("%s: spec.replicas must be at least 2, so one pod serves while another restarts", dep)
	}
	checkHardening(dep, spec, r)

	// srv stays nil when the config could not be judged: that is a
	// problem already, and the checks that need it are left out.
	var srv *served
	if s, ok := c.checkConfig(ctx, dep, spec, ctr, objs, r); ok {
		srv = &s
		checkListenPorts(dep, ctr, s, r)
		checkShutdown(dep, spec, ctr, s.Shutdown.DrainDelay, s.Shutdown.Timeout, r)
	}
	checkProbes(dep, ctr, srv, r)
	checkMemLimit(dep, ctr, r)
	checkPagingSecret(dep, ctr, r)
	checkNetworkPolicies(dep, ctr, podLabels, objs.netpols, r)

	var jobLabels []labels.Set
	for _, j := range objs.jobs {
		jobLabels = append(jobLabels, labels.Set(j.Spec.Template.Labels))
	}
	for _, s := range objs.services {
		o := object{"Service", s.Name}
		sel := labels.SelectorFromSet(s.Spec.Selector)
		if len(s.Spec.Selector) == 0 || !sel.Matches(podLabels) {
			r.problemf("%s: spec.selector %v does not select the pods of %s (labels %v)", o, s.Spec.Selector, dep, podLabels)
		}
		for _, jl := range jobLabels {
			if len(s.Spec.Selector) > 0 && sel.Matches(jl) {
				r.problemf("%s: spec.selector %v also selects the migration Job's pods", o, s.Spec.Selector)
			}
		}
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			n, ok := containerPort(ctr, target)
			if !ok {
				r.problemf("%s: port %q targets %s, which container sheba does not declare", o, p.Name, target.String())
			}
			if p.AppProtocol == nil || *p.AppProtocol == "" {
				r.problemf("%s: port %q has no appProtocol: proxies and meshes would guess the protocol", o, p.Name)
				continue
			}
			if srv == nil || !ok {
				continue
			}
			l, listens := srv.listenerOn(n)
			switch {
			case !listens:
				r.problemf("%s: port %q targets container port %d, where sheba does not listen", o, p.Name, n)
			case l.tls && plaintextProtocols[*p.AppProtocol]:
				r.problemf("%s: port %q has appProtocol %s, plaintext, but targets %s: proxies and meshes would send it what it refuses (want https)", o, p.Name, *p.AppProtocol, l)
			}
		}
		r.notef("%s selects the pods of %s and not the Job's; ports %s", o, dep, servicePorts(s.Spec.Ports))
	}
	for _, p := range objs.pdbs {
		o := object{"PodDisruptionBudget", p.Name}
		if s, err := selectorOf(p.Spec.Selector); err != nil || s.Empty() || !s.Matches(podLabels) {
			r.problemf("%s: spec.selector does not select the pods of %s", o, dep)
		}
	}
	for _, h := range objs.hpas {
		o := object{"HorizontalPodAutoscaler", h.Name}
		t := h.Spec.ScaleTargetRef
		if t.Kind != "Deployment" || t.Name != d.Name {
			r.problemf("%s: scaleTargetRef is %s %q, want Deployment %q", o, t.Kind, t.Name, d.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			r.problemf("%s: spec.minReplicas must be at least 2, or the PodDisruptionBudget blocks every drain of a lone pod", o)
		}
		if h.Spec.MinReplicas != nil {
			r.notef("%s scales %s between %d and %d pods", o, dep, *h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
	}
	for _, j := range objs.jobs {
		o := object{"Job", j.Name}
		jspec := j.Spec.Template.Spec
		checkHardening(o, jspec, r)
		if len(jspec.Containers) != 1 {
			r.problemf("%s: want one container, found %d", o, len(jspec.Containers))
			continue
		}
		jc := jspec.Containers[0]
		if !slices.Equal(jc.Args, []string{"migrate", "up"}) || len(jc.Command) > 0 {
			r.problemf("%s: runs command %q args %q, want the image's sheba with args [migrate up]", o, jc.Command, jc.Args)
		}
		if jc.Image != ctr.Image {
			r.problemf("%s: image %q differs from the Deployment's %q: migrations must come from the code they serve", o, jc.Image, ctr.Image)
		}
		c.checkConfig(ctx, o, jspec, jc, objs, r)
	}
}

// shebaContainer returns the container named sheba.
func shebaContainer(spec corev1.PodSpec) (corev1.Container, bool) {
	for _, c := range spec.Containers {
		if c.Name == "sheba" {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// containerPort resolves a port given by name or number to one the
// container declares.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func servicePorts(ports []corev1.ServicePort) string {
	var parts []string
	for _, p := range ports {
		ap := ""
		if p.AppProtocol != nil {
			ap = *p.AppProtocol
		}
		parts = append(parts, fmt.Sprintf("%s %d→%s (%s)", p.Name, p.Port, p.TargetPort.String(), ap))
	}
	return strings.Join(parts, ", ")
}

// checkHardening checks that every container runs as non-root, on a
// read-only root file system, without privilege escalation or
// capabilities, with requests and limits, and that no API token is
// mounted: sheba needs none of these.
func checkHardening(o object, spec corev1.PodSpec, r *report) {
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		r.problemf("%s: automountServiceAccountToken must be false: sheba never calls the Kubernetes API", o)
	}
	for _, c := range spec.Containers {
		at := fmt.Sprintf("%s: container %q", o, c.Name)
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := pod.RunAsNonRoot
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			r.problemf("%s: runAsNonRoot must be true", at)
		}
		for _, uid := range []*int64{pod.RunAsUser, sc.RunAsUser} {
			if uid != nil && *uid == 0 {
				r.problemf("%s: runAsUser must not be 0", at)
			}
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			r.problemf("%s: securityContext.readOnlyRootFilesystem must be true", at)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			r.problemf("%s: securityContext.allowPrivilegeEscalation must be false", at)
		}
		if sc.Privileged != nil && *sc.Privileged {
			r.problemf("%s: securityContext.privileged must not be true", at)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			r.problemf("%s: securityContext.capabilities must drop ALL and add none", at)
		}
		seccomp := pod.SeccompProfile
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type == corev1.SeccompProfileTypeUnconfined {
			r.problemf("%s: seccompProfile must be RuntimeDefault or Localhost", at)
		}
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			lim, hasLim := c.Resources.Limits[res]
			if !hasReq || !hasLim {
				r.problemf("%s: resources must have a %s request and limit", at, res)
				continue
			}
			if req.Cmp(lim) > 0 {
				r.problemf("%s: %s request %s is above its limit %s", at, res, req.String(), lim.String())
			}
		}
	}
}

// checkListenPorts checks that the ports sheba listens on, by its config,
// are the container's.
func checkListenPorts(o object, c corev1.Container, s served, r *report) {
	var found []string
	ls := s.listeners()
	for _, l := range ls {
		if l.port == 0 {
			r.problemf("%s: %s %q has no port", o, l.key, l.addr)
			continue
		}
		if _, ok := containerPort(c, intstr.FromInt32(l.port)); !ok {
			r.problemf("%s: sheba listens on %s %q, but container sheba declares no containerPort %d", o, l.key, l.addr, l.port)
			continue
		}
		found = append(found, fmt.Sprintf("%s %s", l.key, l.addr))
	}
	if len(found) == len(ls) {
		r.notef("%s: sheba's %s are container ports", o, joinAnd(found))
	}
}

// joinAnd joins a list as prose: "a", "a and b", "a, b and c".
func joinAnd(parts []string) string {
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// checkProbes checks that each probe reaches a port the container declares
// and sheba listens on, that liveness asks only /livez (which never looks
// at Postgres) and that readiness asks sheba's readiness (/readyz or gRPC
// health). With srv (the config, when it could be judged) it also checks
// that each probe speaks what its port serves (docs/tls.md): the kubelet's
// probes get no answer in plaintext from a TLS-only port, none in TLS from
// the operator port, and none from a port whose handshake wants a client
// certificate the probe does not present.
func checkProbes(o object, c corev1.Container, srv *served, r *report) {
	ps := probes(c)
	for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		if ps[kind] == nil {
			r.problemf("%s: container sheba has no %s", o, kind)
		}
	}
	var described []string
	for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		p := ps[kind]
		if p == nil {
			continue
		}
		what, port, ok := probeTarget(p.ProbeHandler)
		if !ok {
			r.problemf("%s: %s: %s", o, kind, what)
			continue
		}
		n, ok := containerPort(c, port)
		if !ok {
			r.problemf("%s: %s %s targets port %s, which container sheba does not declare", o, kind, what, port.String())
			continue
		}
		switch {
		case kind == "livenessProbe" && !(p.HTTPGet != nil && p.HTTPGet.Path == "/livez"):
			r.problemf("%s: livenessProbe must be httpGet /livez: anything that depends on Postgres would restart every pod during a database outage", o)
		case kind == "readinessProbe" && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz":
			r.problemf("%s: readinessProbe asks %s, want /readyz or gRPC health", o, p.HTTPGet.Path)
		case kind == "readinessProbe" && p.TCPSocket != nil:
			r.problemf("%s: readinessProbe is a TCP connect, which stays up while Postgres is down and while sheba drains: want /readyz or gRPC health", o)
		}
		if srv == nil {
			described = append(described, fmt.Sprintf("%s %s → %d", kind, what, n))
			continue
		}
		l, listens := srv.listenerOn(n)
		if !listens {
			r.problemf("%s: %s %s targets port %d, where sheba does not listen (%s)", o, kind, what, n, listenerList(srv.listeners()))
			continue
		}
		if problem := probeTransport(p.ProbeHandler, l, *srv); problem != "" {
			r.problemf("%s: %s %s on port %d: %s", o, kind, what, n, problem)
			continue
		}
		described = append(described, fmt.Sprintf("%s %s → %d, %s", kind, what, n, l))
	}
	if len(described) < 3 {
		return
	}
	r.notef("%s: %s", o, strings.Join(described, "; "))
	if srv != nil && srv.tlsOn() {
		if srv.mtlsOn() {
			r.notef("%s: TLS only on http.addr and grpc.addr (tls.cert_file), with client certificates (tls.client_ca_file): no probe asks them in plaintext or without a client certificate", o)
		} else {
			r.notef("%s: TLS only on http.addr and grpc.addr (tls.cert_file): no probe asks them in plaintext", o)
		}
	}
}

// probeTransport says what is wrong with a probe's handler on listener l,
// or "" when it speaks what l serves.
func probeTransport(h corev1.ProbeHandler, l listener, srv served) string {
	speaksTLS, clientCert, known := probeTLS(h)
	switch {
	case !known:
		// A TCP connect completes on either.
		return ""
	case l.key == "operator.addr" && speaksTLS:
		return fmt.Sprintf("it speaks TLS to %s", l)
	case l.tls && !speaksTLS:
		return fmt.Sprintf("it speaks plaintext to %s, which refuses it: probe operator.addr instead", l)
	case l.tls && srv.mtlsOn() && !clientCert:
		return fmt.Sprintf("%s wants a client certificate signed by tls.client_ca_file, which the probe does not present: probe operator.addr instead", l)
	case l.key == "http.addr" && h.HTTPGet != nil && srv.operatorAddr != "":
		return fmt.Sprintf("with operator.addr set (%s), sheba serves /livez and /readyz there, and no longer on http.addr", srv.operatorAddr)
	}
	return ""
}

// plaintextProtocols are the appProtocol values that tell a proxy or mesh
// to speak plaintext to the port.
var plaintextProtocols = map[string]bool{"http": true, "kubernetes.io/h2c": true, "kubernetes.io/ws": true}

func listenerList(ls []listener) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.key + " " + l.addr
	}
	return strings.Join(parts, ", ")
}

// probeTLS says whether a probe's handler speaks TLS and presents a client
// certificate. known is false for a TCP connect, which has no protocol,
// and for an exec probe kubecheck cannot follow.
func probeTLS(h corev1.ProbeHandler) (speaksTLS, clientCert, known bool) {
	switch {
	case h.HTTPGet != nil:
		// The kubelet's HTTPS skips verification and has no client
		// certificate to present.
		return h.HTTPGet.Scheme == corev1.URISchemeHTTPS, false, true
	case h.GRPC != nil:
		// The kubelet's gRPC probe has no TLS at all.
		return false, false, true
	case isHealthProbe(h):
		args := h.Exec.Command[1:]
		v, set := execFlag(args, "tls", true)
		on, _ := strconv.ParseBool(v)
		_, cert := execFlag(args, "tls-client-cert", false)
		return set && on, cert, true
	}
	return false, false, false
}

// isHealthProbe says whether h runs the image's grpc_health_probe.
func isHealthProbe(h corev1.ProbeHandler) bool {
	return h.Exec != nil && len(h.Exec.Command) > 0 && path.Base(h.Exec.Command[0]) == "grpc_health_probe"
}

// execFlag returns the value of the flag name among args as Go's flag
// package reads them: -name=value or --name=value, and -name value for a
// flag that takes a value; a bool flag given alone is "true".
func execFlag(args []string, name string, isBool bool) (value string, set bool) {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		switch {
		case strings.HasPrefix(a, name+"="):
			return strings.TrimPrefix(a, name+"="), true
		case a == name && isBool:
			return "true", true
		case a == name && i+1 < len(args):
			return args[i+1], true
		}
	}
	return "", false
}

// probeTarget returns what a probe asks and the port it asks on. ok is
// false when the port cannot be told (an exec probe other than
// grpc_health_probe, or one without -addr).
func probeTarget(h corev1.ProbeHandler) (what string, port intstr.IntOrString, ok bool) {
	switch {
	case h.HTTPGet != nil:
		what = "httpGet " + h.HTTPGet.Path
		if h.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			what = "httpGet HTTPS " + h.HTTPGet.Path
		}
		return what, h.HTTPGet.Port, true
	case h.TCPSocket != nil:
		return "tcpSocket", h.TCPSocket.Port, true
	case h.GRPC != nil:
		return "grpc", intstr.FromInt32(h.GRPC.Port), true
	case isHealthProbe(h):
		addr, set := execFlag(h.Exec.Command[1:], "addr", false)
		if !set {
			return "exec grpc_health_probe without -addr", intstr.IntOrString{}, false
		}
		_, p, err := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(p)
		if err != nil || perr != nil {
			return fmt.Sprintf("grpc_health_probe -addr=%s has no port", addr), intstr.IntOrString{}, false
		}
		return "exec grpc_health_probe", intstr.FromInt(n), true
	}
	return "an exec probe kubecheck cannot follow", intstr.IntOrString{}, false
}

// checkShutdown checks the timing of a pod's end: the kubelet must not
// kill sheba before its own shutdown bound, and sheba must keep serving
// until the readiness probe has taken it out of the endpoints.
func checkShutdown(o object, spec corev1.PodSpec, c corev1.Container, drain, timeout time.Duration, r *report) {
	grace := 30 * time.Second // the API's default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	// The kubelet's grace period runs from before preStop; SIGTERM (and so
	// sheba's shutdown.timeout) starts after it.
	if grace <= preStop+timeout {
		r.problemf("%s: terminationGracePeriodSeconds (%v) must be longer than preStop sleep (%v) + shutdown.timeout (%v), or the kubelet kills sheba mid-shutdown", o, grace, preStop, timeout)
	}
	p := c.ReadinessProbe
	if p == nil {
		return
	}
	period, timeoutS, failures := p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold
	if period == 0 {
		period = 10
	}
	if timeoutS == 0 {
		timeoutS = 1
	}
	if failures == 0 {
		failures = 3
	}
	window := time.Duration(period*failures+timeoutS) * time.Second
	if preStop+drain <= window {
		r.problemf("%s: preStop sleep (%v) + shutdown.drain_delay (%v) must be longer than the readiness probe's failure window (%d x %ds + %ds timeout = %v), or sheba stops listening while it still gets traffic", o, preStop, drain, failures, period, timeoutS, window)
		return
	}
	r.notef("%s: terminationGracePeriodSeconds %v > preStop %v + shutdown.timeout %v; preStop + drain_delay %v > readiness failure window %d x %ds + %ds = %v",
		o, grace, preStop, timeout, preStop+drain, failures, period, timeoutS, window)
}

// checkMemLimit checks that GOMEMLIMIT, when set, is below the memory
// limit: the runtime must start collecting before the kernel kills.
func checkMemLimit(o object, c corev1.Container, r *report) {
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" || e.ValueFrom != nil {
			continue
		}
		n, err := parseGoBytes(e.Value)
		if err != nil {
			r.problemf("%s: GOMEMLIMIT %q: %v", o, e.Value, err)
			return
		}
		if n >= lim.Value() {
			r.problemf("%s: GOMEMLIMIT %s (%d bytes) must be below the memory limit %s (%d bytes)", o, e.Value, n, lim.String(), lim.Value())
		}
	}
}

// parseGoBytes parses a size as the Go runtime reads GOMEMLIMIT: a number
// with an optional B, KiB, MiB, GiB or TiB suffix.
func parseGoBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want a number of bytes with an optional B, KiB, MiB, GiB or TiB suffix")
	}
	return n * mult, nil
}
