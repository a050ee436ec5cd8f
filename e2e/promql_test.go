package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// promqlRefs is what a PromQL query reads: its vector selectors, and the
// label names of its grouping clauses (by, without, on, ignoring,
// group_left, group_right).
type promqlRefs struct {
	selectors []promqlSelector
	grouping  []string
}

// promqlSelector is one vector selector: its metric and the label names of
// its matchers.
type promqlSelector struct {
	metric string
	labels []string
}

// promqlKeywords are the words of PromQL that are never a metric name: the
// aggregation operators, the binary and grouping keywords, the modifiers
// and the number words. PromQL matches them in any case.
var promqlKeywords = map[string]bool{
	"sum": true, "avg": true, "count": true, "min": true, "max": true, "group": true,
	"stddev": true, "stdvar": true, "topk": true, "bottomk": true, "count_values": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"offset": true, "inf": true, "nan": true,
}

// groupingKeywords take a list of label names in parentheses.
var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// readPromQL lists the selectors and grouping labels of q, a query that
// promtool has already parsed: the syntax is known to be right, so lexing
// is enough. An identifier is a metric name unless it is a keyword or a
// function (followed by "("); strings, durations, ranges and the insides
// of matchers and label lists are skipped. A selector this cannot name (a
// bare {__name__="x"}, a quoted UTF-8 name) is an error rather than a
// metric that goes unchecked.
func readPromQL(q string) (promqlRefs, error) {
	var refs promqlRefs
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipPromQLString(q, i)
			if err != nil {
				return refs, err
			}
			i = end
		case c == '[':
			// A range or a subquery: durations and a colon only.
			end := strings.IndexByte(q[i:], ']')
			if end < 0 {
				return refs, fmt.Errorf("unclosed [ at %d", i)
			}
			i += end + 1
		case c == '{':
			return refs, fmt.Errorf("selector without a metric name at %d: write name{...}", i)
		case isPromQLDigit(c) || c == '.':
			// A number or a duration: 0.5, 1e3, 0x1f, 1h30m.
			for i < len(q) && (isPromQLNameChar(q[i]) || q[i] == '.') {
				i++
			}
		case isPromQLNameStart(c):
			start := i
			for i < len(q) && isPromQLNameChar(q[i]) {
				i++
			}
			word := q[start:i]
			next := skipPromQLSpace(q, i)
			opens := next < len(q) && q[next] == '('
			switch lower := strings.ToLower(word); {
			case groupingKeywords[lower] && opens:
				end := strings.IndexByte(q[next:], ')')
				if end < 0 {
					return refs, fmt.Errorf("unclosed label list after %s", word)
				}
				for l := range strings.SplitSeq(q[next+1:next+end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						refs.grouping = append(refs.grouping, l)
					}
				}
				i = next + end + 1
			case promqlKeywords[lower], opens:
				// A keyword, or a function.
			default:
				sel := promqlSelector{metric: word}
				if next < len(q) && q[next] == '{' {
					labels, end, err := readMatchers(q, next)
					if err != nil {
						return refs, fmt.Errorf("%s: %w", word, err)
					}
					sel.labels, i = labels, end
				}
				refs.selectors = append(refs.selectors, sel)
			}
		default:
			// Space, parentheses, commas, operators, @.
			i++
		}
	}
	return refs, nil
}

// readMatchers reads the label matchers of the selector whose "{" is at
// q[i], and returns their label names and the index after the "}".
func readMatchers(q string, i int) ([]string, int, error) {
	var labels []string
	i++
	for {
		i = skipPromQLSpace(q, i)
		if i < len(q) && q[i] == '}' {
			return labels, i + 1, nil
		}
		start := i
		for i < len(q) && isPromQLNameChar(q[i]) {
			i++
		}
		name := q[start:i]
		if name == "" || name == "__name__" {
			return nil, 0, fmt.Errorf("matcher at %d names no label, or the metric: name the metric before the braces", start)
		}
		labels = append(labels, name)
		i = skipPromQLSpace(q, i)
		for i < len(q) && strings.IndexByte("=!~", q[i]) >= 0 {
			i++
		}
		i = skipPromQLSpace(q, i)
		end, err := skipPromQLString(q, i)
		if err != nil {
			return nil, 0, fmt.Errorf("matcher of %s: %w", name, err)
		}
		i = skipPromQLSpace(q, end)
		if i < len(q) && q[i] == ',' {
			i++
		}
	}
}

// skipPromQLString returns the index after the string that starts at q[i].
func skipPromQLString(q string, i int) (int, error) {
	if i >= len(q) || strings.IndexByte("\"'`", q[i]) < 0 {
		return 0, fmt.Errorf("want a string at %d", i)
	}
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		switch {
		case q[j] == '\\' && quote != '`':
			j++ // the escaped character
		case q[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d", i)
}

func skipPromQLSpace(q string, i int) int {
	for i < len(q) && strings.IndexByte(" \t\r\n", q[i]) >= 0 {
		i++
	}
	return i
}

func isPromQLDigit(c byte) bool { return '0' <= c && c <= '9' }

// isPromQLNameStart and isPromQLNameChar say what a metric name, a label
// name or a keyword is made of (a label name has no colon, but promtool
// has checked that).
func isPromQLNameStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isPromQLNameChar(c byte) bool { return isPromQLNameStart(c) || isPromQLDigit(c) }

// TestReadPromQL checks the selector reader on the shapes PromQL has,
// those the dashboard uses and those it might.
func TestReadPromQL(t *testing.T) {
	t.Parallel()
	type sel = promqlSelector
	for _, test := range []struct {
		name, query string
		want        promqlRefs
	}{
		{"bare", "up", promqlRefs{selectors: []sel{{metric: "up"}}}},
		{"recorded", "sheba:requests:rate5m", promqlRefs{selectors: []sel{{metric: "sheba:requests:rate5m"}}}},
		{
			"aggregation and range",
			`sum by (method, code) (rate(sheba_requests_total{code!="OK", method=~".*"}[5m]))`,
			promqlRefs{selectors: []sel{{"sheba_requests_total", []string{"code", "method"}}}, grouping: []string{"method", "code"}},
		},
		{
			"quantile",
			`histogram_quantile(0.99, sum(rate(x_bucket{le="0.5"}[5m:1m] offset 1h)) without (instance))`,
			promqlRefs{selectors: []sel{{"x_bucket", []string{"le"}}}, grouping: []string{"instance"}},
		},
		{
			"binary with grouping",
			`a / on (job) group_left (code) b > bool 0 and ignoring(x) c unless d or e`,
			promqlRefs{selectors: []sel{{metric: "a"}, {metric: "b"}, {metric: "c"}, {metric: "d"}, {metric: "e"}}, grouping: []string{"job", "code", "x"}},
		},
		{
			"strings that look like names",
			`label_replace(x{a="sum(y)", b='z}', c=~` + "`w\\`" + `}, "dst", "$1", "src", "(.*)")`,
			promqlRefs{selectors: []sel{{"x", []string{"a", "b", "c"}}}},
		},
		{
			"escaped quote",
			`x{a="say \"b{c}\""} + y`,
			promqlRefs{selectors: []sel{{"x", []string{"a"}}, {metric: "y"}}},
		},
		{
			"numbers, words and functions",
			`count_values("code", x) + topk(5, y) * 1e3 - 0x1f + Inf + vector(1) + time() + z @ start()`,
			promqlRefs{selectors: []sel{{metric: "x"}, {metric: "y"}, {metric: "z"}}},
		},
		{"upper-case keyword", `SUM BY (a) (x)`, promqlRefs{selectors: []sel{{metric: "x"}}, grouping: []string{"a"}}},
		{"empty grouping", `sum by () (x)`, promqlRefs{selectors: []sel{{metric: "x"}}}},
		{"comment", "x # y\n+ z", promqlRefs{selectors: []sel{{metric: "x"}, {metric: "z"}}}},
		{"space before braces", `x {a="1"}`, promqlRefs{selectors: []sel{{"x", []string{"a"}}}}},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := readPromQL(test.query)
			if err != nil {
				t.Fatalf("readPromQL(%q): %v", test.query, err)
			}
			if diff := cmp.Diff(test.want, got, cmp.AllowUnexported(promqlRefs{}, promqlSelector{})); diff != "" {
				t.Errorf("readPromQL(%q) (-want +got):\n%s", test.query, diff)
			}
		})
	}
	for _, q := range []string{`{__name__="x"}`, `x{__name__="y"}`, `{"utf8.name"}`} {
		if refs, err := readPromQL(q); err == nil {
			t.Errorf("readPromQL(%q): got %+v, want an error", q, refs)
		}
	}
}
