"""Pictures on the chat page of `wick serve --mmproj`, in headless Chromium through Selenium.

Usage: web_ui_images.py BASE_URL IMAGE_A IMAGE_B. Attaches image A with the file picker and
image B by a drop, asks the same question about each, and checks that each user message shows
its thumbnail, that the request carried the image (the answers differ from each other and from
a question without one), and that a file that is no image is refused on the page. Prints `done`.
"""

import base64
import shutil
import sys

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE, IMAGE_A, IMAGE_B = sys.argv[1], sys.argv[2], sys.argv[3]
QUESTION = "Describe this picture."

options = webdriver.ChromeOptions()
for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1280,900"]:
    options.add_argument(arg)
options.binary_location = shutil.which("chromium")
driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
wait = WebDriverWait(driver, 120, poll_frequency=0.05,
                     ignored_exceptions=[NoSuchElementException, StaleElementReferenceException])
by_id = lambda i: driver.find_element(By.ID, i)


def set_field(field_id, value):
    if by_id("settings").get_attribute("open") is None:
        driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
    field = by_id(field_id)
    field.clear()
    field.send_keys(value)
    field.send_keys(Keys.TAB)


def ask(text):
    before = len(driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant"))
    box = by_id("input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")) > before)
    wait.until(lambda d: by_id("messages").get_attribute("data-busy") == "false")
    answer = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")[-1]
    assert not answer.find_elements(By.CLASS_NAME, "error"), answer.text
    return answer.find_element(By.CLASS_NAME, "content").text


def new_chat():
    by_id("new-chat").click()


def drop(path, name, mime):
    """Drops the file at `path` on the page, as a person dragging it from their desktop."""
    data = base64.b64encode(open(path, "rb").read()).decode()
    driver.execute_script(
        """
        const [data, name, mime] = arguments;
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, { type: mime }));
        document.querySelector('main').dispatchEvent(
            new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true }));
        """,
        data, name, mime)


try:
    driver.get(BASE + "/")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#model option")) >= 1)
    set_field("temperature", "0")
    set_field("max-tokens", "12")

    # The file picker.
    by_id("attach").send_keys(IMAGE_A)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#attached img")) == 1)
    with_a = ask(QUESTION)
    user = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.user")[-1]
    thumbs = user.find_elements(By.CSS_SELECTOR, "img.thumb")
    assert len(thumbs) == 1, "the message shows its image"
    # Drawn, not blocked: the page's policy lets data: images in.
    wait.until(lambda d: d.execute_script("return arguments[0].naturalWidth", thumbs[0]) == 40)
    assert by_id("attached").get_attribute("hidden") is not None, "the attachments are sent"

    # A drop.
    new_chat()
    drop(IMAGE_B, "b.png", "image/png")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#attached img")) == 1)
    with_b = ask(QUESTION)
    new_chat()
    plain = ask(QUESTION)
    assert len({with_a, with_b, plain}) == 3, (with_a, with_b, plain)

    # Something that is no image is refused on the page.
    drop(IMAGE_A, "notes.txt", "text/plain")
    wait.until(lambda d: "not an image" in by_id("status").text)
    assert not driver.find_elements(By.CSS_SELECTOR, "#attached img")
    print("done")
finally:
    driver.quit()
