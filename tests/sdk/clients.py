"""The official OpenAI and Anthropic Python SDKs as clients of `failover serve`.

Driven by tests/serve_sdk.rs, which starts the gateway and scripted
upstreams (prim: Anthropic Messages, back: OpenAI-compatible) and passes
the gateway's base URL in FAILOVER_URL. Each step's upstream answers are
queued by the Rust test in this order.
"""

import urllib.parse
import os
import sys

import anthropic
import openai

BASE = os.environ["FAILOVER_URL"]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused-by-the-gateway", max_retries=0)
an = anthropic.Anthropic(base_url=BASE, api_key="unused-by-the-gateway", max_retries=0)
HI = [{"role": "user", "content": "hi"}]
passed = 0


def step(name):
    global passed
    passed += 1
    print(f"ok {passed} {name}", flush=True)


# 1. OpenAI SDK, plain, with the gateway's headers.
raw = oa.chat.completions.with_raw_response.create(model="back/model-b", messages=HI)
c = raw.parse()
assert c.choices[0].message.content == "plain openai", c
assert raw.headers["x-failover-model"] == "back/model-b"
assert raw.headers["x-failover-attempts"] == "1"
step("openai plain")

# 2. OpenAI SDK, streaming.
text = ""
for chunk in oa.chat.completions.create(model="back/model-b", messages=HI, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
assert text == "Hello", text
step("openai streaming")

# 3. Anthropic SDK, plain.
m = an.messages.create(model="prim/model-a", max_tokens=32, messages=HI)
assert m.content[0].text == "plain anthropic", m
assert m.stop_reason == "end_turn"
step("anthropic plain")

# 4. Anthropic SDK, streaming.
with an.messages.stream(model="prim/model-a", max_tokens=32, messages=HI) as s:
    text = "".join(s.text_stream)
assert text == "Hi there", text
step("anthropic streaming")

# 5. A fallback across providers and protocols: the Anthropic upstream is
# overloaded (529), the OpenAI-compatible one answers, translated.
raw = an.messages.with_raw_response.create(model="prim/model-a", max_tokens=32, messages=HI)
m = raw.parse()
assert m.content[0].text == "from the fallback", m
assert raw.headers["x-failover-model"] == "back/model-b"
# ASCII (issue 48), the whole notice in its RFC 8187 parameter.
notice = raw.headers["x-failover-notice"]
assert notice.startswith("Model Fallback: back/model-b"), raw.headers
assert urllib.parse.unquote(notice.split("; text*=UTF-8''")[1]).startswith("\u21aa\ufe0f Model Fallback: back/model-b"), notice
step("cross-protocol fallback")

# 6. The chain exhausted, every candidate rate limited: a 429 the SDK
# raises as RateLimitError, with the summary and Retry-After.
try:
    oa.chat.completions.create(model="prim/model-a", messages=HI)
    raise AssertionError("expected an error")
except openai.RateLimitError as e:
    assert e.status_code == 429
    assert "All models failed (2): prim/model-a: " in e.message, e.message
    assert int(e.response.headers["retry-after"]) >= 1
    assert len(e.body["failover"]["attempts"]) == 2, e.body
step("exhausted chain")

# 7. The same exhaustion seen by the Anthropic SDK (both still cooling:
# nothing is called, every candidate is skipped).
try:
    an.messages.create(model="prim/model-a", max_tokens=32, messages=HI)
    raise AssertionError("expected an error")
except anthropic.APIStatusError as e:
    assert e.status_code in (429, 503), e.status_code
    assert e.body["error"]["message"].startswith("All models failed"), e.body
step("exhausted chain, anthropic")

print(f"{passed} passed, 0 failed")
