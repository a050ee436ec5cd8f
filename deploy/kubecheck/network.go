package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// metadataAddrs are the cloud metadata services' addresses (AWS, GCP and
// Azure's 169.254.169.254; AWS's IPv6 one), whose credentials no pod of
// sheba may reach: a webhook URL could point there.
var metadataAddrs = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

// checkNetworkPolicyRules applies the API server's rules for a
// NetworkPolicy that a strict decode does not cover: ipBlocks are CIDRs
// whose exceptions lie strictly inside them, and port ranges are numbers
// in order.
func checkNetworkPolicyRules(np *networkingv1.NetworkPolicy, r *report) {
	o := object{"NetworkPolicy", np.Name}
	if _, err := selectorOf(&np.Spec.PodSelector); err != nil {
		r.problemf("%s: spec.podSelector: %v", o, err)
	}
	var peers []networkingv1.NetworkPolicyPeer
	var ports []networkingv1.NetworkPolicyPort
	for _, in := range np.Spec.Ingress {
		peers, ports = append(peers, in.From...), append(ports, in.Ports...)
	}
	for _, out := range np.Spec.Egress {
		peers, ports = append(peers, out.To...), append(ports, out.Ports...)
	}
	for _, p := range peers {
		if p.IPBlock == nil {
			continue
		}
		cidr, err := netip.ParsePrefix(p.IPBlock.CIDR)
		if err != nil {
			r.problemf("%s: ipBlock cidr %q: %v", o, p.IPBlock.CIDR, err)
			continue
		}
		for _, e := range p.IPBlock.Except {
			except, err := netip.ParsePrefix(e)
			switch {
			case err != nil:
				r.problemf("%s: ipBlock %s except %q: %v", o, cidr, e, err)
			case except.Bits() <= cidr.Bits() || !cidr.Contains(except.Addr()):
				r.problemf("%s: ipBlock %s except %s: must be strictly inside the cidr", o, cidr, except)
			}
		}
	}
	for _, p := range ports {
		switch {
		case p.Port == nil:
		case p.Port.Type == intstr.String:
			for _, e := range validation.IsValidPortName(p.Port.StrVal) {
				r.problemf("%s: port %q: %s", o, p.Port.StrVal, e)
			}
			if p.EndPort != nil {
				r.problemf("%s: port %q: endPort needs a numeric port", o, p.Port.StrVal)
			}
		case p.EndPort != nil && *p.EndPort < p.Port.IntVal:
			r.problemf("%s: port %d: endPort %d is below it", o, p.Port.IntVal, *p.EndPort)
		}
	}
}

// checkNetworkPolicies checks what the NetworkPolicies that select the
// Deployment's pods let through, together (the API allows what any of them
// allows): both directions are restricted, ingress reaches every container
// port, and egress never reaches a metadata address.
func checkNetworkPolicies(dep object, ctr corev1.Container, podLabels labels.Set, nps []*networkingv1.NetworkPolicy, r *report) {
	var names []string
	var ingress []networkingv1.NetworkPolicyIngressRule
	var egress []networkingv1.NetworkPolicyEgressRule
	ingressLimited, egressLimited := false, false
	for _, np := range nps {
		s, err := selectorOf(&np.Spec.PodSelector)
		if err != nil || !s.Matches(podLabels) {
			continue
		}
		names = append(names, np.Name)
		in, out := policyTypes(np)
		if in {
			ingressLimited = true
			ingress = append(ingress, np.Spec.Ingress...)
		}
		if out {
			egressLimited = true
			egress = append(egress, np.Spec.Egress...)
		}
	}
	if len(names) == 0 {
		r.problemf("%s: no NetworkPolicy selects its pods (labels %v): they may reach anything, the cloud's metadata service included", dep, podLabels)
		return
	}
	if !ingressLimited || !egressLimited {
		r.problemf("%s: the NetworkPolicies that select its pods (%s) must have policyTypes Ingress and Egress", dep, strings.Join(names, ", "))
		return
	}
	var reached []string
	for _, cp := range ctr.Ports {
		if !slices.ContainsFunc(ingress, func(rule networkingv1.NetworkPolicyIngressRule) bool { return allowsPort(rule.Ports, cp) }) {
			r.problemf("%s: no NetworkPolicy ingress rule reaches container port %s %d: the Service and probes would be refused", dep, cp.Name, cp.ContainerPort)
			continue
		}
		reached = append(reached, fmt.Sprintf("%s %d", cp.Name, cp.ContainerPort))
	}
	blocked := true
	for i, rule := range egress {
		for _, addr := range metadataAddrs {
			if allowsAddr(rule.To, addr) {
				r.problemf("%s: a NetworkPolicy egress rule (%d of %d) lets its pods reach the metadata address %s", dep, i+1, len(egress), addr)
				blocked = false
			}
		}
	}
	if blocked && len(reached) == len(ctr.Ports) {
		policies := "NetworkPolicy " + names[0] + " selects"
		if len(names) > 1 {
			policies = "NetworkPolicies " + strings.Join(names, ", ") + " select"
		}
		r.notef("%s the pods of %s: ingress to %s; egress in %d rules, none to %v",
			policies, dep, strings.Join(reached, ", "), len(egress), metadataAddrs)
	}
}

// policyTypes says which directions a policy restricts, with the API's
// default when it does not say: ingress always, egress when it has
// egress rules.
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress),
		slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
}

// allowsPort says whether a rule's ports let traffic reach container port
// cp: no ports means all of them.
func allowsPort(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	want := cp.Protocol
	if want == "" {
		want = corev1.ProtocolTCP
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != want {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if p.Port.StrVal == cp.Name {
				return true
			}
		case p.EndPort != nil:
			if p.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == cp.ContainerPort:
			return true
		}
	}
	return false
}

// allowsAddr says whether an egress rule's peers include addr, on some
// port: no peers means every address. Pod and namespace selectors pick
// pods, which never have a metadata address.
func allowsAddr(to []networkingv1.NetworkPolicyPeer, addr netip.Addr) bool {
	if len(to) == 0 {
		return true
	}
	for _, p := range to {
		if p.IPBlock == nil {
			continue
		}
		cidr, err := netip.ParsePrefix(p.IPBlock.CIDR)
		if err != nil || !cidr.Contains(addr) {
			continue
		}
		excepted := slices.ContainsFunc(p.IPBlock.Except, func(e string) bool {
			except, err := netip.ParsePrefix(e)
			return err == nil && except.Contains(addr)
		})
		if !excepted {
			return true
		}
	}
	return false
}
