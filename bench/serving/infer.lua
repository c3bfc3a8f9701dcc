-- wrk script: POST one V2 inference body, then print a one-line JSON summary.
-- The body is read from the file named by WRK_BODY (JSON, written by bench_serving.py).

local f = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\nWRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
