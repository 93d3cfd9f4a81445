"""The official OpenAI and Anthropic Python SDKs authenticating to `failover
serve` with a client key (SPEC R18.2), driven by
crates/gateway/tests/it/serve_keys.rs, which passes the gateway's base URL in
FAILOVER_URL and a key made for the test in FAILOVER_KEY.
"""

import os

import anthropic
import openai

BASE = os.environ["FAILOVER_URL"]
KEY = os.environ["FAILOVER_KEY"]
HI = [{"role": "user", "content": "hi"}]
passed = failed = 0


def check(name, ok):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok {name}", flush=True)
    else:
        failed += 1
        print(f"FAILED {name}", flush=True)


oa = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)
c = oa.chat.completions.create(model="back/model-b", messages=HI)
check("openai sdk with the key", c.choices[0].message.content == "hello openai")

an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
m = an.messages.create(model="prim/model-a", max_tokens=16, messages=HI)
check("anthropic sdk with the key", m.content[0].text == "hello anthropic")

bad = openai.OpenAI(base_url=BASE + "/v1", api_key="fo-not-a-key", max_retries=0)
try:
    bad.chat.completions.create(model="back/model-b", messages=HI)
    check("openai sdk, wrong key", False)
except openai.AuthenticationError as e:
    check("openai sdk, wrong key", e.status_code == 401 and KEY not in str(e))

bad = anthropic.Anthropic(base_url=BASE, api_key="fo-not-a-key", max_retries=0)
try:
    bad.messages.create(model="prim/model-a", max_tokens=16, messages=HI)
    check("anthropic sdk, wrong key", False)
except anthropic.AuthenticationError as e:
    check("anthropic sdk, wrong key", e.status_code == 401 and KEY not in str(e))

print(f"{passed} passed, {failed} failed", flush=True)
raise SystemExit(1 if failed else 0)
