package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/shebasvc/sheba/config"
)

// standIns are well-formed values for variables that come from Secrets,
// which are not in the repository: they let the config be checked as it
// will run. Other Secret-sourced variables are left unset.
var standIns = map[string]string{
	"DATABASE_URL":        "postgres://stand-in@localhost:5432/sheba",
	"SHEBA_PAGING_SECRET": strings.Repeat("5ca1ab1e", 8),
}

// checkConfig finds the config file a container reads (SHEBA_CONFIG, in a
// mounted ConfigMap), checks the TLS files it names (checkTLSFiles), has
// `sheba config check` judge it with the container's environment, and
// returns it loaded. ok is false when there is no config to judge or sheba
// rejects it; either is a problem.
func (c checker) checkConfig(ctx context.Context, o object, spec corev1.PodSpec, ctr corev1.Container, objs objects, r *report) (s served, ok bool) {
	file, err := configFile(spec, ctr, objs)
	if err != nil {
		r.problemf("%s: container %q: %v", o, ctr.Name, err)
		return served{}, false
	}
	env, unset := containerEnv(ctr, objs)
	checkDevKey(o, ctr.Name, file, env, r)
	s = readServed(file.content, env)
	checkTLSFiles(o, spec, ctr, s, r)

	dir, err := os.MkdirTemp("", "kubecheck-")
	if err != nil {
		r.problemf("%s: %v", o, err)
		return served{}, false
	}
	defer os.RemoveAll(dir)
	if len(s.files) > 0 {
		standIns, err := writeStandInTLS(dir)
		if err != nil {
			r.problemf("%s: writing stand-in TLS files: %v", o, err)
			return served{}, false
		}
		// The variable wins over the file, so this stands in for a path
		// set either way.
		for _, f := range tlsFiles {
			if s.files[f.key] != "" {
				env[f.env] = standIns[f.key]
				unset = append(unset, f.key+" stood in")
			}
		}
	}
	name := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(name, []byte(file.content), 0o600); err != nil {
		r.problemf("%s: writing the config file: %v", o, err)
		return served{}, false
	}

	// sheba itself is the judge of its config: the binary, with exactly the
	// pod's environment and nothing from ours.
	cmd := exec.CommandContext(ctx, c.sheba, "config", "check", "--config", name)
	cmd.Env = []string{}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(strings.ReplaceAll(out.String(), name, file.String()))
		r.problemf("%s: container %q: sheba config check rejects %s: %s (%v)", o, ctr.Name, file, msg, err)
		return served{}, false
	}
	s.Config, err = config.Load(name, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		// sheba accepted it, so this binary's config package differs from
		// the one sheba was built with.
		r.problemf("%s: %s: accepted by %s but not by kubecheck's config package (rebuild sheba): %v", o, file, c.sheba, err)
		return served{}, false
	}
	note := fmt.Sprintf("%s: container %q: sheba config check accepts %s with the container's environment", o, ctr.Name, file)
	if len(unset) > 0 {
		note += fmt.Sprintf(" (Secret values stood in or left unset: %s)", strings.Join(unset, ", "))
	}
	r.notef("%s", note)
	return s, true
}

// configSource is a config file held in a ConfigMap.
type configSource struct {
	configMap, key, content string
}

func (s configSource) String() string { return "ConfigMap " + s.configMap + " key " + s.key }

// configFile returns the file that SHEBA_CONFIG names, which must be a key
// of a ConfigMap mounted in the container.
func configFile(spec corev1.PodSpec, ctr corev1.Container, objs objects) (configSource, error) {
	var file string
	for _, e := range ctr.Env {
		if e.Name == "SHEBA_CONFIG" && e.ValueFrom == nil {
			file = e.Value
		}
	}
	if file == "" {
		return configSource{}, fmt.Errorf("no SHEBA_CONFIG value: say which mounted file sheba reads")
	}
	m, rel, ok := mountOf(ctr, file)
	if !ok {
		return configSource{}, fmt.Errorf("SHEBA_CONFIG %s is on no mounted volume", file)
	}
	vol := volumeNamed(spec, m.Name)
	if vol == nil || vol.ConfigMap == nil {
		return configSource{}, fmt.Errorf("SHEBA_CONFIG %s is on volume %q, which is not a ConfigMap", file, m.Name)
	}
	key, _, ok := volumeKey(vol.ConfigMap.Items, rel)
	if !ok {
		return configSource{}, fmt.Errorf("SHEBA_CONFIG %s: volume %q projects no item to %s", file, m.Name, rel)
	}
	for _, cm := range objs.configMaps {
		if cm.Name != vol.ConfigMap.Name {
			continue
		}
		content, ok := cm.Data[key]
		if !ok {
			return configSource{}, fmt.Errorf("SHEBA_CONFIG %s: ConfigMap %s has no key %q", file, cm.Name, key)
		}
		return configSource{configMap: cm.Name, key: key, content: content}, nil
	}
	return configSource{}, fmt.Errorf("SHEBA_CONFIG %s: ConfigMap %q is not among the rendered objects", file, vol.ConfigMap.Name)
}

// mountOf returns the container's mount that holds file and file's path
// inside that mount's volume: the deepest mount at or above file, as the
// container sees its file system.
func mountOf(ctr corev1.Container, file string) (m corev1.VolumeMount, rel string, ok bool) {
	file = path.Clean(file)
	depth := -1
	for _, cand := range ctr.VolumeMounts {
		at := path.Clean(cand.MountPath)
		var inside string
		switch {
		case file == at && cand.SubPath != "":
			// A subPath mount of one file.
		case strings.HasPrefix(file, strings.TrimSuffix(at, "/")+"/"):
			inside = strings.TrimPrefix(file, strings.TrimSuffix(at, "/")+"/")
		default:
			continue
		}
		if d := strings.Count(at, "/"); d > depth {
			m, rel, ok, depth = cand, path.Join(cand.SubPath, inside), true, d
		}
	}
	return m, rel, ok
}

// volumeNamed returns the pod's volume called name, or nil.
func volumeNamed(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// volumeKey returns the key of a ConfigMap or Secret volume that the kubelet
// writes at rel inside it, and the item's own mode if it has one: with items,
// only those are written, each at its path; without, every key at its name.
func volumeKey(items []corev1.KeyToPath, rel string) (key string, mode *int32, ok bool) {
	if len(items) == 0 {
		return rel, nil, true
	}
	for _, it := range items {
		if path.Clean(it.Path) == rel {
			return it.Key, it.Mode, true
		}
	}
	return "", nil, false
}

// containerEnv returns the variables the container gets from its literal
// values and from the rendered ConfigMaps, plus stand-ins for Secret
// values, without SHEBA_CONFIG (the file is passed by --config). unset
// lists the Secret-sourced variables, and what became of them.
func containerEnv(ctr corev1.Container, objs objects) (env map[string]string, unset []string) {
	env = map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.Name == "SHEBA_CONFIG":
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			if v, ok := standIns[e.Name]; ok {
				env[e.Name] = v
				unset = append(unset, e.Name+" stood in")
			} else {
				unset = append(unset, e.Name+" unset")
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			for _, cm := range objs.configMaps {
				if v, ok := cm.Data[ref.Key]; ok && cm.Name == ref.Name {
					env[e.Name] = v
				}
			}
		}
	}
	return env, unset
}
