"""The official OpenAI Python SDK's `responses.create` as a client of
`failover serve`'s `POST /v1/responses` (issue 33).

Driven by crates/gateway/tests/it/serve_sdk.rs, which starts the gateway
and scripted upstreams (prim: OpenAI Responses, back: Chat Completions)
and passes the gateway's base URL in FAILOVER_URL. Each step's upstream
answers are queued by the Rust test in this order.
"""

import json
import os

import openai

BASE = os.environ["FAILOVER_URL"]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused-by-the-gateway", max_retries=0)
passed = 0


def step(name):
    global passed
    passed += 1
    print(f"ok {passed} {name}", flush=True)


# 1. Plain, on a Responses upstream (same protocol), with the gateway's headers.
raw = oa.responses.with_raw_response.create(model="prim/model-a", input="hi")
r = raw.parse()
assert r.output_text == "plain responses", r
assert raw.headers["x-failover-model"] == "prim/model-a"
step("responses plain")

# 2. Streaming, the Responses upstream's events relayed; the SDK's own
# assembler checks the sequence and gives the final response.
with oa.responses.stream(model="prim/model-a", input="hi") as s:
    text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    final = s.get_final_response()
assert text == "Hello", text
assert final.output_text == "Hello", final
step("responses streaming")

# 3. A fallback across protocols, streamed: the Responses upstream is rate
# limited, the Chat Completions one answers, translated into Responses
# events the SDK assembles.
with oa.responses.stream(model="prim/model-a", input="hi") as s:
    text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
    final = s.get_final_response()
assert text == "from the fallback", text
assert final.output_text == "from the fallback", final
assert final.status == "completed"
step("responses streaming fallback (chat completions upstream)")

# 4. A tool call, answered by the Chat Completions upstream, plain.
tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
r = oa.responses.create(model="back/model-b", input="Weather in Paris?", tools=tools)
calls = [o for o in r.output if o.type == "function_call"]
assert len(calls) == 1, r
assert calls[0].name == "get_weather", calls
assert json.loads(calls[0].arguments) == {"city": "Paris"}, calls
# The tool's result goes back as a function_call_output.
r2 = oa.responses.create(
    model="back/model-b",
    input=[{"role": "user", "content": "Weather in Paris?"},
           {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
           {"type": "function_call_output", "call_id": calls[0].call_id, "output": "21C"}],
    tools=tools,
)
assert r2.output_text == "It is 21C.", r2
step("responses tool call")

# 5. A tool call, streamed from the Chat Completions upstream.
with oa.responses.stream(model="back/model-b", input="Weather in Paris?", tools=tools) as s:
    for _ in s:
        pass
    final = s.get_final_response()
calls = [o for o in final.output if o.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", final
assert json.loads(calls[0].arguments) == {"city": "Paris"}, calls
step("responses tool call streaming")

# 6. The chain exhausted: an APIError with the gateway's status.
try:
    oa.responses.create(model="prim/model-a", input="hi")
    raise SystemExit("expected an error")
except openai.RateLimitError as e:
    assert e.status_code == 429, e
step("responses exhausted chain is an error")

print(f"{passed} passed, 0 failed")
