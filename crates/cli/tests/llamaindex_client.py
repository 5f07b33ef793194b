"""Drives a running `wick serve` with LlamaIndex's `OpenAILike`.

Usage: python llamaindex_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)
Exits non-zero on the first failed check.
"""

import sys

from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike

BASE = sys.argv[1]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


llm = OpenAILike(
    model="smollm2",
    api_base=BASE,
    api_key="unused",
    is_chat_model=True,
    context_window=4096,
    max_tokens=24,
    temperature=0,
    max_retries=0,
)
messages = [
    ChatMessage(role="system", content="You are a helpful assistant."),
    ChatMessage(role="user", content="What is the capital of France?"),
]

whole = llm.chat(messages)
text = whole.message.content
check(isinstance(text, str) and text.strip(), f"chat answers: {text!r}")

streamed = "".join(part.delta or "" for part in llm.stream_chat(messages))
check(streamed == text, f"streamed = whole: {streamed!r} vs {text!r}")

completion = llm.complete("The capital of France is")
check(completion.text.strip() != "", f"complete answers: {completion.text!r}")

# A completion model too: the same server's /v1/completions.
plain = OpenAILike(
    model="smollm2",
    api_base=BASE,
    api_key="unused",
    is_chat_model=False,
    max_tokens=8,
    temperature=0,
    max_retries=0,
)
raw = plain.complete("The capital of France is")
check(raw.text.strip() != "", f"a completion model answers: {raw.text!r}")
streamed_raw = "".join(part.delta or "" for part in plain.stream_complete("The capital of France is"))
check(streamed_raw == raw.text, f"streamed completion = whole: {streamed_raw!r} vs {raw.text!r}")

print("all llamaindex checks passed")
