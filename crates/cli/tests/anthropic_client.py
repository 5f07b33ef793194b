"""Drives a running `wick serve` with the official `anthropic` package.

Usage: python anthropic_client.py BASE_URL API_KEY   (e.g. http://127.0.0.1:8080 s3cret)
The server must run the SmolLM2 test model with `--output-format hermes` and `--api-key`.
Exits non-zero on the first failed check.
"""

import json
import sys
import urllib.request

import anthropic

BASE, KEY = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
with urllib.request.urlopen(urllib.request.Request(
        f"{BASE}/v1/models", headers={"Authorization": f"Bearer {KEY}"})) as r:
    MODEL = json.load(r)["data"][0]["id"]

TOOLS = [
    {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "cache_control": {"type": "ephemeral"},
    },
    {
        "name": "get_time",
        "description": "The current time in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
]
# This SDK version has no sampling arguments (newer Claude models take none); the API's
# `temperature` still travels in the body.
GREEDY = {"temperature": 0}
SYSTEM = [{"type": "text", "text": "You are a helpful assistant.",
           "cache_control": {"type": "ephemeral"}}]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what.splitlines()[0][:100]}")


def user(text):
    return [{"role": "user", "content": text}]


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def plain_and_streamed():
    kwargs = dict(model=MODEL, max_tokens=32, system=SYSTEM, extra_body=GREEDY,
                  messages=user("Name three colors."))
    whole = client.messages.create(**kwargs)
    check(whole.type == "message" and whole.role == "assistant", f"a message: {whole}")
    check(whole.id.startswith("msg_"), f"id {whole.id}")
    check(bool(text_of(whole)), f"non-streamed text: {text_of(whole)!r}")
    check(all(b.type == "text" for b in whole.content), "text blocks only")
    check(whole.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {whole.stop_reason}")
    check(whole.usage.output_tokens > 0, f"usage {whole.usage}")
    prompt = whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    check(prompt > 0, f"prompt tokens {whole.usage}")
    with client.messages.stream(**kwargs) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(streamed_text == text_of(whole),
          f"streamed == non-streamed:\n{streamed_text!r}\n{text_of(whole)!r}")
    check(text_of(final) == streamed_text, "get_final_message has the streamed text")
    check(final.stop_reason == whole.stop_reason, f"same stop_reason {final.stop_reason}")
    check(final.usage.output_tokens == whole.usage.output_tokens, f"same usage {final.usage}")
    check(final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == prompt,
          f"same prompt tokens {final.usage}")
    # The raw event stream: Anthropic's order.
    names = [e.type for e in client.messages.create(stream=True, **kwargs)]
    check(names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"],
          f"event order {names[:3]}…{names[-3:]}")
    check("content_block_start" in names and "content_block_stop" in names, "block events")
    count = client.messages.count_tokens(model=MODEL, system=SYSTEM,
                                         messages=user("Name three colors."))
    check(count.input_tokens == prompt, f"count_tokens {count.input_tokens} == {prompt}")
    # Structured output: output_config.format holds the answer to a JSON schema.
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 16}},
              "required": ["color"], "additionalProperties": False}
    shaped = client.messages.create(model=MODEL, max_tokens=48, extra_body=GREEDY,
                                    messages=user("Name a color as JSON."),
                                    output_config={"format": {"type": "json_schema",
                                                              "schema": schema}})
    check(isinstance(json.loads(text_of(shaped)).get("color"), str),
          f"output_config.format json_schema: {text_of(shaped)!r}")
    # The beta client adds ?beta=true to the path.
    beta = client.beta.messages.create(**kwargs)
    check(beta.type == "message", "beta.messages.create (?beta=true)")


def forced_call(label, **kwargs):
    """A forced call, whole and streamed: one `get_weather` tool_use with an object input.
    Shape only when streamed: with the prompt cache warm, llama.cpp's unified KV cache can flip
    greedy near-ties (an engine issue, as the openai client test notes)."""
    whole = client.messages.create(**kwargs)
    uses = [b for b in whole.content if b.type == "tool_use"]
    check(len(uses) == 1 and uses[0].name == "get_weather", f"{label}: one call: {whole.content}")
    check(whole.stop_reason == "tool_use", f"{label}: stop_reason {whole.stop_reason}")
    check(uses[0].id.startswith("toolu_"), f"{label}: id {uses[0].id}")
    check(isinstance(uses[0].input, dict), f"{label}: input is an object: {uses[0].input!r}")
    with client.messages.stream(**kwargs) as stream:
        for _ in stream:
            pass
        final = stream.get_final_message()
    suses = [b for b in final.content if b.type == "tool_use"]
    check(len(suses) == 1 and suses[0].name == "get_weather",
          f"{label}: the SDK accumulated one call: {final.content}")
    check(isinstance(suses[0].input, dict), f"{label}: streamed input is an object")
    check(final.stop_reason == "tool_use", f"{label}: streamed stop_reason tool_use")
    return whole


def tools():
    base = dict(model=MODEL, max_tokens=64, extra_body=GREEDY, tools=TOOLS,
                messages=user("What is the weather in Paris?"))
    whole = forced_call("tool_choice=tool", tool_choice={"type": "tool", "name": "get_weather"},
                        **base)
    # By name means that tool, not any tool: get_time is never called.
    timed = client.messages.create(**{**base, "tool_choice": {"type": "tool", "name": "get_time"}})
    names = [b.name for b in timed.content if b.type == "tool_use"]
    check(names == ["get_time"], f"tool_choice names get_time: {names}")
    call = next(b for b in whole.content if b.type == "tool_use")
    # The round trip: the call and its result in the history.
    history = base["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in whole.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
    ]
    answer = client.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, tools=TOOLS,
                                    tool_choice={"type": "none"}, messages=history)
    check(all(b.type == "text" for b in answer.content) and bool(text_of(answer)),
          f"tool_result round trip answered in text: {answer.content}")
    check(answer.stop_reason in ("end_turn", "max_tokens"), f"stop {answer.stop_reason}")
    counted = client.messages.count_tokens(model=MODEL, tools=TOOLS, messages=history)
    check(counted.input_tokens > 0, f"count_tokens with tools: {counted.input_tokens}")


def prefill():
    """A final assistant turn is continued: its prompt is the plain one plus the prefill's
    tokens, and the answer (only the new text) streams as it answers whole."""
    question = user("Name three colors.")
    said = "Red, green"
    prefilled = question + [{"role": "assistant", "content": said}]
    plain = client.messages.count_tokens(model=MODEL, messages=question).input_tokens
    both = client.messages.count_tokens(model=MODEL, messages=prefilled).input_tokens
    req = urllib.request.Request(f"{BASE}/tokenize", data=json.dumps({"content": said}).encode(),
                                 headers={"Authorization": f"Bearer {KEY}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        n = len(json.load(r)["tokens"])
    check(both == plain + n, f"a prefill's prompt is the plain prompt + its {n} tokens: "
                             f"{both} vs {plain}")
    kwargs = dict(model=MODEL, max_tokens=16, extra_body=GREEDY, messages=prefilled)
    whole = client.messages.create(**kwargs)
    check(bool(text_of(whole)), f"a prefill is continued: {text_of(whole)!r}")
    with client.messages.stream(**kwargs) as stream:
        streamed = "".join(stream.text_stream)
    check(streamed == text_of(whole), f"prefill streamed == whole: {streamed!r}")


def errors():
    bad = anthropic.Anthropic(base_url=BASE, api_key="wrong-key", max_retries=0)
    try:
        bad.messages.create(model=MODEL, max_tokens=8, messages=user("hi"))
        check(False, "a wrong key is refused")
    except anthropic.AuthenticationError as e:
        check(e.status_code == 401 and e.body["error"]["type"] == "authentication_error",
              f"a wrong key is an AuthenticationError: {e.body}")
    bearer = anthropic.Anthropic(base_url=BASE, auth_token=KEY, max_retries=0)
    check(bearer.messages.create(model=MODEL, max_tokens=4, messages=user("hi")).type == "message",
          "Authorization: Bearer is accepted too")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}
    try:
        client.messages.create(model=MODEL, max_tokens=8,
                               messages=[{"role": "user", "content": [image]}])
        check(False, "an image is refused by a model without a projector")
    except anthropic.BadRequestError as e:
        check(e.body["error"]["type"] == "invalid_request_error"
              and "no projector" in e.body["error"]["message"],
              f"an image is a BadRequestError that says why: {e.body}")
    try:
        client.messages.create(model="no-such-model", max_tokens=8, messages=user("hi"))
        check(False, "an unknown model is refused")
    except anthropic.NotFoundError as e:
        check(e.body["error"]["type"] == "not_found_error", f"unknown model: {e.body}")


for test in (plain_and_streamed, tools, prefill, errors):
    test()
print("all anthropic client checks passed")
