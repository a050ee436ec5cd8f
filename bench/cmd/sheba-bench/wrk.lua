-- wrk script written by sheba-bench for one side of one scenario. It sends
-- {{.Method}} {{.Path}}, counts responses by status in each thread, and at
-- the end prints one line "BENCHJSON {...}" with the totals and wrk's
-- latency percentiles (microseconds, over all responses).
wrk.method = "{{.Method}}"
wrk.path = "{{.Path}}"
{{- range $k, $v := .Headers}}
wrk.headers["{{$k}}"] = "{{$v}}"
{{- end}}
{{- if .Body}}
wrk.body = {{lua .Body}}
{{- end}}

counts = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end
{{if .IDsFile}}
-- A random seeded account per request.
local ids = {}
for line in io.lines("{{.IDsFile}}") do
  ids[#ids + 1] = line
end
math.randomseed(os.time())

function request()
  return wrk.format(nil, "{{.PathPrefix}}" .. ids[math.random(#ids)] .. "{{.PathSuffix}}")
end
{{end}}
function response(status, headers, body)
  -- A gRPC-Web answer is 200 whatever its outcome: one whose grpc-status
  -- (in its headers, or in the trailer frame of its body) is not 0 counts
  -- as "grpc-<code>".
  local ct = headers["Content-Type"]
  if ct and string.sub(ct, 1, 20) == "application/grpc-web" then
    local code = headers["Grpc-Status"] or string.match(string.lower(body or ""), "grpc%-status:%s*(%d+)")
    if code ~= "0" then
      status = "grpc-" .. tostring(code)
    end
  end
  counts[status] = (counts[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("counts")) do
      total[status] = (total[status] or 0) + n
    end
  end
  local parts = {}
  for status, n in pairs(total) do
    parts[#parts + 1] = string.format('"%s":%d', tostring(status), n)
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"statuses":{%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.timeout,
    table.concat(parts, ",")))
end
