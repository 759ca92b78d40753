-- wrk script: POST /api/collect with a fixed body, counting answers by status.
-- Environment: TALLY_KEY (API key), TALLY_EVENTS (events per request).
local key = os.getenv("TALLY_KEY")
local per_request = tonumber(os.getenv("TALLY_EVENTS") or "1")

local event = '{"name":"pageview","path":"/bench","visitorId":"v1","sessionId":"s1",'
  .. '"metadata":{"browser":"Chrome","deviceType":"desktop"}}'
local events = {}
for i = 1, per_request do events[i] = event end

wrk.method = "POST"
wrk.path = "/api/collect"
wrk.body = '{"events":[' .. table.concat(events, ",") .. ']}'
wrk.headers["content-type"] = "application/json"
wrk.headers["x-api-key"] = key

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  accepted = 0
  refused = 0
end

function response(status, headers, body)
  if status == 202 then accepted = accepted + 1 else refused = refused + 1 end
end

function done(summary, latency, requests)
  local ok, bad = 0, 0
  for _, thread in ipairs(threads) do
    ok = ok + thread:get("accepted")
    bad = bad + thread:get("refused")
  end
  io.write(string.format(
    "TALLY_RESULT {\"accepted_requests\": %d, \"refused_requests\": %d, \"events_per_request\": %d, "
    .. "\"duration_s\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"errors\": %d}\n",
    ok, bad, per_request, summary.duration / 1e6, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
