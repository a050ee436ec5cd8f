// Package prometheus_test checks the Prometheus rules of the operator pack
// (rules.yaml, docs/alerts.md): promtool, from Debian's prometheus package
// (make test installs it), checks them and runs their unit tests
// (rules_test.yaml), and every alert must lead to its runbook.
package prometheus_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// runbookBase is where every runbook_url points, before its anchor.
const runbookBase = "https://github.com/shebasvc/sheba/blob/main/docs/alerts.md#"

// promtool runs promtool with args in this folder and fails with its
// output when it fails.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool not found: install it (Debian: apt-get install prometheus; make test does)")
	}
	out, err := exec.Command("promtool", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestCheckRules(t *testing.T) {
	promtool(t, "check", "rules", "rules.yaml")
}

func TestRulesUnitTests(t *testing.T) {
	promtool(t, "test", "rules", "rules_test.yaml")
}

// rule is the part of a rule these tests read.
type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func alertingRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "rules.yaml", &f)
	var alerts []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("rules.yaml: no alerting rule")
	}
	return alerts
}

// TestAlertsDocumented checks that every alert has a summary, a
// description and a severity, and a runbook_url whose anchor is a heading
// of docs/alerts.md.
func TestAlertsDocumented(t *testing.T) {
	anchors := headingAnchors(t, "../../docs/alerts.md")
	for _, r := range alertingRules(t) {
		for _, key := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[key] == "" {
				t.Errorf("%s %v: no %s annotation", r.Alert, r.Labels, key)
			}
		}
		switch r.Labels["severity"] {
		case "page", "ticket":
		default:
			t.Errorf("%s %v: severity %q, want page or ticket", r.Alert, r.Labels, r.Labels["severity"])
		}
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		if !ok {
			t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
			continue
		}
		if !anchors[anchor] {
			t.Errorf("%s: runbook_url %q: docs/alerts.md has no heading with anchor %q", r.Alert, url, anchor)
		}
	}
}

// TestAlertsTested checks that rules_test.yaml makes every alert fire
// and keeps it quiet at least once each.
func TestAlertsTested(t *testing.T) {
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "rules_test.yaml", &f)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range alertingRules(t) {
		if !fires[r.Alert] {
			t.Errorf("rules_test.yaml: no test makes %s fire", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("rules_test.yaml: no test keeps %s quiet (exp_alerts empty)", r.Alert)
		}
	}
}

// notInAnchor is what GitHub drops from a heading to make its anchor.
var notInAnchor = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces made hyphens.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		title = strings.ReplaceAll(title, "`", "")
		anchor := strings.ReplaceAll(notInAnchor.ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		anchors[anchor] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}
