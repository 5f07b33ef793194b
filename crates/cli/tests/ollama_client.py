"""Drives a running `wick serve` with the official `ollama` package.

Usage: python ollama_client.py BASE_URL MODEL_FILE
(e.g. http://127.0.0.1:8080 /path/model.gguf). The server must run the SmolLM2 test model with
`--output-format hermes`, and a WICK_HOME of its own (the pull check stores MODEL_FILE there).
Exits non-zero on the first failed check.
"""

import json
import sys

import ollama

BASE, MODEL_FILE = sys.argv[1], sys.argv[2]
client = ollama.Client(host=BASE)
GREEDY = {"temperature": 0, "seed": 1, "num_predict": 48}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


# Listing: the served model, as Ollama describes one.
models = client.list().models
check(len(models) == 1 and models[0].model, f"list names the served model: {models}")
MODEL = models[0].model
check(models[0].details.format == "gguf" and models[0].size > 0, "list gives format and size")

# Plain chat.
messages = [{"role": "user", "content": "Name three colors."}]
whole = client.chat(model=MODEL, messages=messages, options=GREEDY)
check(whole.done and whole.message.role == "assistant", "chat answers an assistant message")
check(whole.message.content.strip() != "", f"chat has content: {whole.message.content!r}")
check(whole.done_reason in ("stop", "length"), f"done_reason {whole.done_reason}")
check(whole.eval_count > 0 and whole.prompt_eval_count > 0, "chat counts tokens")
check(whole.total_duration > 0 and whole.eval_duration >= 0, "chat has durations")

# Streamed chat: the concatenation equals the whole answer for a greedy request.
parts = list(client.chat(model=MODEL, messages=messages, options=GREEDY, stream=True))
check(len(parts) > 2 and parts[-1].done and not any(p.done for p in parts[:-1]),
      f"stream ends with one done part ({len(parts)} parts)")
streamed = "".join(p.message.content for p in parts)
check(streamed == whole.message.content,
      f"streamed == whole: {streamed!r} vs {whole.message.content!r}")
check(parts[-1].eval_count == whole.eval_count, "the last part carries the counts")

# Generate, whole and streamed.
gen = client.generate(model=MODEL, prompt="The capital of France is", options=GREEDY)
check(gen.done and gen.response.strip() != "", f"generate answers: {gen.response!r}")
gen_parts = list(client.generate(model=MODEL, prompt="The capital of France is",
                                 options=GREEDY, stream=True))
check("".join(p.response for p in gen_parts) == gen.response, "streamed generate == whole")
raw = client.generate(model=MODEL, raw=True, options=GREEDY,
                      prompt="<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")
check(raw.done and raw.response != "", f"raw generate answers: {raw.response!r}")

# A tool call: the shape (Ollama has no way to force a call, and this small model seldom calls
# unforced; when it does, the call must name the tool and carry an object).
tool_answer = client.chat(
    model=MODEL,
    messages=[{"role": "system", "content": "Call a tool when one can answer."},
              {"role": "user", "content": "What is the weather in Paris?"}],
    tools=TOOLS, options={"temperature": 0, "seed": 1, "num_predict": 96})
calls = tool_answer.message.tool_calls or []
print(f"tool answer: calls={calls} content={tool_answer.message.content!r}")
for call in calls:
    check(call.function.name == "get_weather", f"the call names the tool: {call}")
    check(isinstance(call.function.arguments, dict), "arguments are an object")
# The round trip: the call in history, its result as a `tool` message.
call = calls[0] if calls else {"function": {"name": "get_weather",
                                            "arguments": {"city": "Paris"}}}
round_trip = client.chat(model=MODEL, options=GREEDY, tools=TOOLS, messages=[
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call]},
    {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"},
])
check(round_trip.done and round_trip.message.role == "assistant", "the tool round trip answers")

# JSON output.
js = client.chat(model=MODEL, format="json", options={**GREEDY, "num_predict": 200},
                 messages=[{"role": "user",
                            "content": "Give a JSON object about a cat, with name and age."}])
check(isinstance(json.loads(js.message.content), dict), f"format=json: {js.message.content!r}")
schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
js = client.chat(model=MODEL, format=schema, options={**GREEDY, "num_predict": 200},
                 messages=[{"role": "user", "content": "Name a cat, as JSON."}])
check(isinstance(json.loads(js.message.content).get("name"), str),
      f"format=schema: {js.message.content!r}")

# Embeddings.
emb = client.embed(model=MODEL, input=["the sea", "the sky"])
check(len(emb.embeddings) == 2 and len(emb.embeddings[0]) > 0, "embed gives two vectors")
legacy = client.embeddings(model=MODEL, prompt="the sea")
check(len(legacy.embedding) == len(emb.embeddings[0]), "embeddings gives one vector")

# Show and ps.
shown = client.show(MODEL)
check("completion" in (shown.capabilities or []), f"capabilities {shown.capabilities}")
check(shown.modelinfo.get("general.architecture") == "llama", "model_info from GGUF metadata")
check("llama.context_length" in shown.modelinfo, "model_info has the context length")
check((shown.template or "") != "" and shown.details.quantization_level == "Q4_1",
      "show gives the template and the quantization")
running = client.ps().models
check(len(running) == 1 and running[0].model == MODEL and running[0].size_vram >= 0,
      f"ps lists the loaded model: {running}")

# Pull (a local file, into the server's own store) and delete.
progress = list(client.pull(MODEL_FILE, stream=True))
check(progress[-1].status == "success", f"pull ends in success: {progress[-1]}")
check(any(p.digest for p in progress), "pull reports the digest")
stored = MODEL_FILE.rsplit("/", 1)[-1].removesuffix(".gguf")
check(client.delete(stored).status == "success", "delete removes the stored model")

# Errors: an unknown model is a ResponseError with status 404, streamed or not.
for stream in (False, True):
    try:
        result = client.chat(model="no-such-model:7b", messages=messages, stream=stream)
        if stream:
            list(result)
        check(False, "an unknown model raises")
    except ollama.ResponseError as e:
        check(e.status_code == 404 and "not found" in e.error, f"unknown model: {e}")
try:
    client.generate(model=MODEL, prompt="def f(x):", suffix="return x")
    check(False, "suffix raises")
except ollama.ResponseError as e:
    check(e.status_code == 400 and "fill-in-the-middle" in e.error, f"suffix: {e}")
try:
    client.delete("no-such-model")
    check(False, "deleting an unknown model raises")
except ollama.ResponseError as e:
    check(e.status_code == 404, f"delete unknown: {e}")

print("all ollama client checks passed")
