package main

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// devKeySHA256 is the hash of the development API key of config/dev.yaml,
// sha256("sheba-dev-key-not-a-secret"): the key is printed in the docs, so
// a deployed config that accepts it accepts anyone.
const devKeySHA256 = "e4ccd6ac185343fd6cf8ef200416646ae7487fcf6c898a6b032991dafa06e8df"

// checkDevKey reports the development key's hash wherever the config file
// or a variable a container is judged with holds it.
func checkDevKey(o object, ctr string, file configSource, env map[string]string, r *report) {
	if strings.Contains(file.content, devKeySHA256) {
		r.problemf("%s: container %q: %s holds the development API key's hash (config/dev.yaml), whose key is public: make keys with `sheba apikey new`", o, ctr, file)
	}
	var names []string
	for name, v := range env {
		if strings.Contains(v, devKeySHA256) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		r.problemf("%s: container %q: %s holds the development API key's hash (config/dev.yaml), whose key is public: make keys with `sheba apikey new`", o, ctr, name)
	}
}

// checkPagingSecret checks that sheba's container gets paging.secret from
// a Secret, and that the pod cannot start without it: a pod without it
// signs page tokens with a random key of its own, so a client's next page
// fails whenever another pod answers.
func checkPagingSecret(o object, c corev1.Container, r *report) {
	const why = "without paging.secret each pod signs page tokens with a key of its own, and a next page fails on the other pods"
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SHEBA_PAGING_SECRET" })
	if i < 0 {
		r.problemf("%s: container sheba has no SHEBA_PAGING_SECRET from a Secret: %s", o, why)
		return
	}
	switch ref := c.Env[i].ValueFrom; {
	case ref == nil || ref.SecretKeyRef == nil:
		r.problemf("%s: SHEBA_PAGING_SECRET must come from a Secret (secretKeyRef), not be written in the manifest", o)
	case ref.SecretKeyRef.Optional != nil && *ref.SecretKeyRef.Optional:
		r.problemf("%s: SHEBA_PAGING_SECRET's secretKeyRef must not be optional: %s", o, why)
	default:
		r.notef("%s: SHEBA_PAGING_SECRET comes from Secret %s key %s, required", o, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
	}
}
