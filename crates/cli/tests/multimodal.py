"""Images through the official Python SDKs against a running `wick serve --mmproj`.

Usage: python multimodal.py BASE_URL IMAGE_A IMAGE_B
The server runs the SmolLM2 test model with wick-testutil's test projector. Each SDK sends
image A twice and image B once, greedily: the same image gives the same answer, another image
another, and a request without the image a third; a repeated image's prompt comes from the
cache (OpenAI's `cached_tokens`). Exits non-zero on the first failed check.
"""

import base64
import sys

import anthropic
import ollama
import openai

BASE, IMAGE_A, IMAGE_B = sys.argv[1], sys.argv[2], sys.argv[3]
A = base64.b64encode(open(IMAGE_A, "rb").read()).decode()
B = base64.b64encode(open(IMAGE_B, "rb").read()).decode()
QUESTION = "Describe this picture."


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


# OpenAI: image_url parts with data URLs.
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="none", max_retries=0)


def openai_ask(image):
    content = [{"type": "text", "text": QUESTION}]
    if image:
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}})
    answer = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": content}], max_tokens=12, temperature=0
    )
    return answer.choices[0].message.content, answer.usage


a1, first = openai_ask(A)
a2, again = openai_ask(A)
b1, _ = openai_ask(B)
plain, _ = openai_ask(None)
check(a1 == a2, f"openai: the same image, the same answer ({a1!r})")
check(a1 != b1, f"openai: another image, another answer ({b1!r})")
check(a1 != plain, f"openai: the image changes the answer ({plain!r})")
check(
    again.prompt_tokens_details.cached_tokens == again.prompt_tokens,
    f"openai: the repeated image's prompt is cached ({again.prompt_tokens_details})",
)
try:
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
        ]}],
        max_tokens=4,
    )
    check(False, "openai: bytes that are no image are refused")
except openai.BadRequestError as e:
    check("not image data" in str(e), f"openai: not an image is a 400 that says so: {e}")

# Anthropic: image blocks with a base64 source.
messages = anthropic.Anthropic(base_url=BASE, api_key="none", max_retries=0).messages


def anthropic_ask(image):
    answer = messages.create(
        # This SDK version has no `temperature` argument; it still travels in the body.
        model="m", max_tokens=12, extra_body={"temperature": 0},
        messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}},
            {"type": "text", "text": QUESTION},
        ]}],
    )
    return answer.content[0].text, answer.usage


x1, _ = anthropic_ask(A)
x2, usage = anthropic_ask(A)
y1, _ = anthropic_ask(B)
check(x1 == x2 and x1 != y1, f"anthropic: the same image, the same answer; another, another ({x1!r}, {y1!r})")
check(usage.cache_read_input_tokens > 0, f"anthropic: the repeated image is read from the cache ({usage})")

# Ollama: `images` as base64 strings (and the SDK reads files itself).
ollama_client = ollama.Client(host=BASE)


def ollama_ask(image):
    answer = ollama_client.chat(
        model="m", messages=[{"role": "user", "content": QUESTION, "images": [image]}],
        options={"temperature": 0, "num_predict": 12},
    )
    return answer.message.content


o1, o2, o3 = ollama_ask(A), ollama_ask(IMAGE_A), ollama_ask(B)
check(o1 == o2, f"ollama: a base64 image and the same file agree ({o1!r})")
check(o1 != o3, f"ollama: another image, another answer ({o3!r})")
generated = ollama_client.generate(model="m", prompt=QUESTION, images=[A],
                                   options={"temperature": 0, "num_predict": 12})
check(len(generated.response) > 0, f"ollama: generate takes images ({generated.response!r})")
print("all multimodal client checks passed")
