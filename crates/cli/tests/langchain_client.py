"""Drives a running `wick serve` with LangChain's `ChatOpenAI` (langchain-openai).

Usage: python langchain_client.py BASE_URL   (e.g. http://127.0.0.1:8080/v1)
The server must run the SmolLM2 test model with `--output-format hermes`.
Exits non-zero on the first failed check.
"""

import json
import sys

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

BASE = sys.argv[1]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)
    print(f"ok: {what}")


# LangChain's default model name: a server of one model answers any name.
llm = ChatOpenAI(base_url=BASE, api_key="unused", temperature=0, max_tokens=24, max_retries=0)
question = [
    SystemMessage("You are a helpful assistant."),
    HumanMessage("What is the capital of France?"),
]

whole = llm.invoke(question)
check(isinstance(whole.content, str) and whole.content.strip(), f"invoke answers: {whole.content!r}")
usage = whole.usage_metadata or {}
check(usage.get("input_tokens", 0) > 0 and usage.get("output_tokens", 0) > 0, f"usage: {usage}")

streamed = "".join(chunk.content for chunk in llm.stream(question))
check(streamed == whole.content, f"streamed = whole: {streamed!r} vs {whole.content!r}")

answers = llm.batch([[HumanMessage("Say hello.")], [HumanMessage("Say goodbye.")]])
check(len(answers) == 2 and all(a.content for a in answers), "batch answers each request")


class Weather(BaseModel):
    """The current weather in a city."""

    city: str = Field(description="The city")


# A forced tool call (room for the whole call), and its round trip.
roomy = ChatOpenAI(base_url=BASE, api_key="unused", temperature=0, max_tokens=96, max_retries=0)
caller = roomy.bind_tools([Weather], tool_choice="Weather")
call = caller.invoke([HumanMessage("What is the weather in Paris?")])
check(len(call.tool_calls) == 1 and call.tool_calls[0]["name"] == "Weather", f"forced call: {call.tool_calls}")
args = call.tool_calls[0]["args"]
check(isinstance(args.get("city"), str), f"arguments follow the schema: {args}")
after = llm.invoke(
    [
        HumanMessage("What is the weather in Paris?"),
        call,
        ToolMessage(json.dumps({"weather": "sunny"}), tool_call_id=call.tool_calls[0]["id"]),
    ]
)
check(isinstance(after.content, str), f"the tool result is answered: {after.content!r}")

# Structured output through a JSON schema.
structured = roomy.with_structured_output(Weather, method="json_schema")
value = structured.invoke([HumanMessage("Name a city and its weather.")])
check(isinstance(value, Weather) and isinstance(value.city, str), f"structured output: {value!r}")

print("all langchain checks passed")
