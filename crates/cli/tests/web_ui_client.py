"""The chat page of `wick serve` in headless Chromium, driven through Selenium (issue 19).

Usage: web_ui_client.py BASE_URL API_KEY SCREENSHOT_DIR  (an empty API_KEY: none; an empty
SCREENSHOT_DIR: no screenshots). Prints `done` when every check passed.
"""

import json
import shutil
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE, API_KEY, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]


def browser():
    options = webdriver.ChromeOptions()
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"]:
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium")
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


driver = browser()
# The answer's element is replaced as it streams: a lookup may find one that just went.
wait = WebDriverWait(driver, 120, poll_frequency=0.02,
                     ignored_exceptions=[NoSuchElementException, StaleElementReferenceException])
by_id = lambda i: driver.find_element(By.ID, i)


def metric(name):
    request = urllib.request.Request(f"{BASE}/metrics")
    if API_KEY:
        request.add_header("Authorization", f"Bearer {API_KEY}")
    for line in urllib.request.urlopen(request).read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def set_field(field_id, value):
    if by_id("settings").get_attribute("open") is None:
        driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
    field = by_id(field_id)
    field.clear()
    field.send_keys(value)
    field.send_keys(Keys.TAB)  # fires `change`


def busy():
    return by_id("messages").get_attribute("data-busy") == "true"


def last_answer():
    return driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")[-1]


def send(text):
    """Sends `text` and returns every length the answer had while it streamed."""
    box = by_id("input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    wait.until(lambda d: busy())
    lengths = []
    while busy():
        try:
            length = len(last_answer().find_element(By.CLASS_NAME, "content").text)
        except Exception:  # replaced between the two lookups while streaming
            continue
        if not lengths or lengths[-1] != length:
            lengths.append(length)
        time.sleep(0.01)
    return lengths


def stats():
    wait.until(lambda d: not busy())
    return last_answer().find_element(By.CLASS_NAME, "stats").text


try:
    driver.get(BASE + "/")
    assert driver.title == "wick", driver.title
    if API_KEY:
        # Without the key the page says so and opens the settings.
        wait.until(lambda d: "API key" in by_id("status").text)
        set_field("api-key", API_KEY)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#model option")) >= 1)
    set_field("temperature", "0")
    set_field("max-tokens", "64")

    # An answer streams in: its text grows over several updates, then the numbers show.
    lengths = send("Tell me about the sea.")
    first_answer = last_answer().find_element(By.CLASS_NAME, "content").text
    assert first_answer, "an answer"
    assert len([n for n in lengths if n > 0]) >= 2, f"streamed in pieces: {lengths}"
    line = stats()
    assert "first token" in line and "tokens/s" in line and "cached prompt tokens" in line, line

    # A follow-up in the same conversation reuses the cached prompt.
    send("And about the wind?")
    cached = int(stats().split(" cached prompt tokens")[0].split("· ")[-1])
    assert cached > 0, stats()
    if SHOTS:
        if by_id("settings").get_attribute("open") is not None:
            driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
        driver.save_screenshot(f"{SHOTS}/chat-page-desktop.png")
        driver.set_window_size(390, 844)
        driver.save_screenshot(f"{SHOTS}/chat-page-narrow.png")
        driver.set_window_size(1280, 900)

    # Stop a long answer: the request is cancelled and the server frees the sequence.
    by_id("new-chat").click()
    set_field("max-tokens", "3000")
    by_id("input").send_keys("Write a very long story about a dragon and a knight." + Keys.ENTER)
    wait.until(lambda d: busy() and len(last_answer().find_element(By.CLASS_NAME, "content").text) > 20)
    by_id("stop").click()
    wait.until(lambda d: not busy())
    assert "stopped" in stats(), stats()
    deadline = time.time() + 20
    while metric("wick_live_sequences") != 0:
        assert time.time() < deadline, "the stopped answer's sequence was not freed"
        time.sleep(0.1)
    set_field("max-tokens", "64")

    # Reload: the conversations are still there, the first one with its answer.
    driver.refresh()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == 2)
    titles = [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#conversations .title")]
    assert "Tell me about the sea." in titles, titles
    sea = [t for t in driver.find_elements(By.CSS_SELECTOR, "#conversations .title")
           if t.text == "Tell me about the sea."][0]
    sea.click()
    answers = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant .content")
    assert answers[0].text == first_answer, (answers[0].text, first_answer)

    # A model answer holding HTML shows it as text: no element, no script run. The answer is
    # held to a grammar so the model says exactly this.
    payload = "Look: <img src=x onerror=window.__xss=1> and **bold**"
    grammar = "root ::= " + json.dumps(payload)
    by_id("new-chat").click()
    set_field("extra", json.dumps({"grammar": grammar}))
    send("Say something.")
    content = last_answer().find_element(By.CLASS_NAME, "content")
    assert "<img src=x onerror=window.__xss=1>" in content.text, content.text
    assert not content.find_elements(By.TAG_NAME, "img"), content.get_attribute("innerHTML")
    assert content.find_element(By.TAG_NAME, "strong").text == "bold", content.get_attribute("innerHTML")
    assert driver.execute_script("return window.__xss") is None
    set_field("extra", "")

    # Delete a conversation: it is gone, after a reload too.
    before = len(driver.find_elements(By.CSS_SELECTOR, "#conversations li"))
    driver.find_elements(By.CSS_SELECTOR, "#conversations .delete")[0].click()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#conversations li")) == before - 1
    driver.refresh()
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#conversations li")) == before - 1)
    # No script error and no missing file (a 401 before the key was given is expected).
    errors = [e for e in driver.get_log("browser")
              if e["level"] == "SEVERE" and "401 (Unauthorized)" not in e["message"]]
    assert not errors, errors
finally:
    driver.quit()
print("done")
