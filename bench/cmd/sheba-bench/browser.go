package main

// The rows of the browser protocols (docs/browser.md): PingService/Ping
// over Connect (JSON and proto) and gRPC-Web, each against ping-rest on the
// same sheba in the same run, so that the CPU per request compares the
// transcoding by vanguard with grpc-gateway's REST path (their goals are in
// goals).

// browserScenarios are the browser protocols' rows; hdr holds the API key
// header every request sends, restPing is ping-rest's load.
func (b *bench) browserScenarios(hdr map[string]string, restPing func(*server) load) []scenario {
	post := func(contentType, body string, more map[string]string) func(*server) load {
		h := map[string]string{"Content-Type": contentType}
		for k, v := range hdr {
			h[k] = v
		}
		for k, v := range more {
			h[k] = v
		}
		return func(s *server) load {
			return wrkLoad{bin: b.bins.wrk, baseURL: s.httpURL, script: wrkScript{Method: "POST", Path: "/sheba.v1.PingService/Ping", Headers: h, Body: body}}
		}
	}
	connect := map[string]string{"Connect-Protocol-Version": "1"}
	rest := side{label: "sheba REST", server: srvSheba, expect: []string{"200"}, load: restPing}
	row := func(name, about, label string, l func(*server) load) scenario {
		return scenario{
			name: name, about: about + ", against ping-rest (GET /v1/ping) on the same sheba",
			a: side{label: label, server: srvSheba, expect: []string{"200"}, load: l}, b: rest,
			conc: b.opts.conc,
		}
	}
	return []scenario{
		// The empty PingRequest: {} in JSON, no bytes in proto, one empty
		// frame in gRPC-Web.
		row("ping-connect-json", "POST /sheba.v1.PingService/Ping over Connect with JSON", "sheba Connect JSON",
			post("application/json", "{}", connect)),
		row("ping-connect-proto", "POST /sheba.v1.PingService/Ping over Connect with proto", "sheba Connect proto",
			post("application/proto", "", connect)),
		row("ping-grpc-web", "POST /sheba.v1.PingService/Ping over gRPC-Web (binary)", "sheba gRPC-Web",
			post("application/grpc-web+proto", "\x00\x00\x00\x00\x00", map[string]string{"X-Grpc-Web": "1"})),
	}
}
