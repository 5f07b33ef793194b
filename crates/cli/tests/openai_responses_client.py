"""Drives a running `wick serve` with the official `openai` package's Responses API.

Usage: python openai_responses_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)
The server must run the SmolLM2 test model with `--output-format hermes`.
Exits non-zero on the first failed check.
"""

import json
import sys

import openai

BASE = sys.argv[1]
client = openai.OpenAI(base_url=BASE, api_key="unused", max_retries=0)
MODEL = client.models.list().data[0].id

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "strict": True,
    }
]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what.splitlines()[0][:100]}")


def plain_and_streamed():
    kwargs = dict(model=MODEL, input="Name three colors.", instructions="Answer briefly.",
                  max_output_tokens=32, temperature=0)
    whole = client.responses.create(**kwargs)
    check(whole.object == "response" and whole.id.startswith("resp_"), f"a response: {whole}")
    check(whole.status in ("completed", "incomplete"), f"status {whole.status}")
    check(bool(whole.output_text), f"output_text: {whole.output_text!r}")
    message = whole.output[0]
    check(message.type == "message" and message.role == "assistant", f"a message: {message}")
    check(message.content[0].type == "output_text", "output_text part")
    check(whole.usage.output_tokens > 0 and whole.usage.input_tokens > 0, f"usage {whole.usage}")
    check(whole.usage.total_tokens == whole.usage.input_tokens + whole.usage.output_tokens,
          "total_tokens")
    check(whole.instructions == "Answer briefly.", "instructions echoed")
    with client.responses.stream(**kwargs) as stream:
        deltas = []
        names = []
        for event in stream:
            names.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    streamed = "".join(deltas)
    check(streamed == whole.output_text,
          f"streamed == non-streamed:\n{streamed!r}\n{whole.output_text!r}")
    check(final.output_text == streamed, "get_final_response has the streamed text")
    check(final.status == whole.status, f"same status {final.status}")
    check(final.usage.output_tokens == whole.usage.output_tokens, f"same usage {final.usage}")
    check(names[:2] == ["response.created", "response.in_progress"]
          and names[-1] in ("response.completed", "response.incomplete"),
          f"event order {names[:3]}…{names[-2:]}")
    # The raw stream: numbered events.
    numbers = [e.sequence_number for e in client.responses.create(stream=True, **kwargs)]
    check(numbers == list(range(len(numbers))), f"sequence numbers {numbers[:5]}…")


def tools():
    base = dict(model=MODEL, input="What is the weather in Paris?", tools=TOOLS, temperature=0,
                max_output_tokens=64)
    forced = client.responses.create(tool_choice={"type": "function", "name": "get_weather"},
                                     **base)
    calls = [i for i in forced.output if i.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", f"one call: {forced.output}")
    call = calls[0]
    check(isinstance(json.loads(call.arguments), dict), f"arguments are a JSON object: {call}")
    check(bool(call.call_id) and call.id.startswith("fc_"), f"ids: {call}")
    # Streamed: the SDK accumulates the call (shape only: greedy near-ties may vary with the
    # prompt cache warm).
    with client.responses.stream(tool_choice={"type": "function", "name": "get_weather"},
                                 **base) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    scalls = [i for i in final.output if i.type == "function_call"]
    check(len(scalls) == 1 and scalls[0].name == "get_weather",
          f"the SDK accumulated one call: {final.output}")
    check(isinstance(json.loads(scalls[0].arguments), dict), "streamed arguments are JSON")
    # The round trip through the store: the output goes back with previous_response_id.
    answer = client.responses.create(
        model=MODEL, previous_response_id=forced.id, tools=TOOLS, tool_choice="none",
        temperature=0, max_output_tokens=24,
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": "sunny, 21 C"}])
    check(answer.previous_response_id == forced.id, "previous_response_id echoed")
    check(bool(answer.output_text), f"function_call_output answered in text: {answer.output}")
    check(answer.usage.input_tokens > forced.usage.input_tokens,
          f"the continuation holds the earlier turn: {answer.usage} vs {forced.usage}")
    # The same round trip, the items sent by hand (no store).
    by_hand = client.responses.create(
        model=MODEL, tools=TOOLS, tool_choice="none", temperature=0, max_output_tokens=24,
        store=False,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "sunny, 21 C"}])
    check(bool(by_hand.output_text) and by_hand.store is False, "items by hand answered")


def structured():
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 16}},
              "required": ["color"], "additionalProperties": False}
    shaped = client.responses.create(
        model=MODEL, input="Name a color as JSON.", temperature=0, max_output_tokens=48,
        text={"format": {"type": "json_schema", "name": "color", "schema": schema,
                         "strict": True}})
    check(isinstance(json.loads(shaped.output_text).get("color"), str),
          f"text.format json_schema: {shaped.output_text!r}")
    check(shaped.text.format.type == "json_schema", f"text echoed: {shaped.text}")


def store():
    first = client.responses.create(model=MODEL, input="Say hello.", temperature=0,
                                    max_output_tokens=16)
    got = client.responses.retrieve(first.id)
    check(got.id == first.id and got.output_text == first.output_text, "retrieve")
    second = client.responses.create(model=MODEL, input="Again.", previous_response_id=first.id,
                                     temperature=0, max_output_tokens=16)
    check(second.usage.input_tokens > first.usage.input_tokens, "continued from the first")
    client.responses.delete(first.id)
    for what, call in [("retrieve", lambda: client.responses.retrieve(first.id)),
                       ("previous_response_id", lambda: client.responses.create(
                           model=MODEL, input="x", previous_response_id=first.id))]:
        try:
            call()
            check(False, f"{what} after delete is refused")
        except openai.NotFoundError as e:
            check(e.status_code == 404, f"{what} after delete is a NotFoundError: {e.body}")
    try:
        client.responses.create(model=MODEL, input="x", tools=[{"type": "web_search"}])
        check(False, "a hosted tool is refused")
    except openai.BadRequestError as e:
        check(e.body["param"] == "tools", f"a hosted tool is a BadRequestError: {e.body}")


for test in (plain_and_streamed, tools, structured, store):
    test()
print("all openai responses client checks passed")
