"""Issue 32: the official SDKs read a stream that broke after its first
byte and was finished by the fallback (tests/it/serve_streams.rs,
`official_sdks_read_continued_streams`). Both upstreams speak Anthropic
Messages; the Rust test queues the answers in this order. Prints one JSON
line per case with the text the SDK assembled and its usage.
"""

import json
import os

import anthropic
import openai

BASE = os.environ["FAILOVER_URL"]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key="unused-by-the-gateway", max_retries=0)
an = anthropic.Anthropic(base_url=BASE, api_key="unused-by-the-gateway", max_retries=0)
HI = [{"role": "user", "content": "hi"}]

# 1. OpenAI SDK: the primary is cut after five words, the fallback
# continues the answer from a prefill (translated both ways).
text, usage = "", None
for chunk in oa.chat.completions.create(
    model="prim/model-a", messages=HI, stream=True, stream_options={"include_usage": True}
):
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage.model_dump()
print(json.dumps({"sdk": "openai", "text": text, "usage": usage}), flush=True)

# 2. Anthropic SDK: the same break; the SDK's accumulator builds one
# message from the spliced events.
with an.messages.stream(model="prim/model-a", max_tokens=32, messages=HI) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
print(
    json.dumps(
        {
            "sdk": "anthropic",
            "text": text,
            "blocks": len(final.content),
            "final_text": final.content[0].text,
            "stop_reason": final.stop_reason,
            "usage": final.usage.model_dump(),
        }
    ),
    flush=True,
)
