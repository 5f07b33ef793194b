"""Drives a running `wick serve` of several models with the official `ollama` package: the
listing, `ps` with `expires_at`, `chat` with `keep_alive`, and `generate` with an empty prompt
to load (`keep_alive: -1`: forever) and unload (`keep_alive: 0`) a model.

Usage: python ollama_models_client.py BASE_URL MODEL
(MODEL: a served model that is not loaded yet). Exits non-zero on the first failed check.
"""

import datetime
import sys
import time

import ollama

BASE, MODEL = sys.argv[1], sys.argv[2]
client = ollama.Client(host=BASE)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def loaded():
    return {m.model: m for m in client.ps().models}


names = [m.model for m in client.list().models]
check(MODEL in names and len(names) >= 2, f"list shows every served model: {names}")
check(MODEL not in loaded(), f"{MODEL} is not loaded before it is asked for")

# A chat loads it; its keep_alive sets when it unloads.
answer = client.chat(
    model=MODEL,
    messages=[{"role": "user", "content": "Hi"}],
    options={"temperature": 0, "num_predict": 4},
    keep_alive="10m",
)
check(answer.done, "chat with keep_alive answers")
running = loaded()
check(MODEL in running, f"ps shows {MODEL} loaded: {list(running)}")
left = running[MODEL].expires_at - datetime.datetime.now(datetime.timezone.utc)
check(
    datetime.timedelta(minutes=8) < left <= datetime.timedelta(minutes=10),
    f"it expires in about 10 minutes: {left}",
)

# An empty generate with keep_alive 0 unloads it.
unload = client.generate(model=MODEL, keep_alive=0)
check(unload.done and unload.done_reason == "unload", f"generate unloads: {unload}")
# Unloaded at once when idle, else when the requests still ending on it are done.
for _ in range(100):
    if MODEL not in loaded():
        break
    time.sleep(0.1)
check(MODEL not in loaded(), "ps no longer shows it")

# An empty generate with keep_alive -1 loads it to stay.
load = client.generate(model=MODEL, keep_alive=-1)
check(load.done and load.done_reason == "load", f"generate loads: {load}")
running = loaded()
check(
    MODEL in running and running[MODEL].expires_at.year > 2100,
    f"kept forever: {running.get(MODEL)}",
)

# An unknown model is Ollama's 404.
try:
    client.chat(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    check(False, "an unknown model fails")
except ollama.ResponseError as e:
    check(e.status_code == 404, f"an unknown model is a 404: {e}")

print("all ollama model checks passed")
