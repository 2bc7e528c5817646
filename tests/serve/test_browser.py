"""The search page in headless Chromium (Debian's `chromium` + `chromium-driver`, driven by
Selenium; `.ci/run` installs both): typing a video's caption shows that video first with its
thumbnail loaded, and clicking it plays the video from the matching moment."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from lit_retrieval.data.annotations import load_annotations  # noqa: E402
from lit_retrieval.data.items import MediaItem  # noqa: E402
from lit_retrieval.data.text.queries import concat_query  # noqa: E402
from helpers.serve_helpers import LiveServer, make_service  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver (.ci/run)"),
]


@pytest.fixture()
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not download a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--mute-audio",
        "--autoplay-policy=no-user-gesture-required",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_typing_a_caption_shows_its_video_and_clicking_plays_the_moment(corpus, tmp_path, browser):
    service = make_service(corpus, tmp_path / "index", tmp_path / "cache")
    record = load_annotations(corpus / "annotations.json")[5]
    expected = next(i for i, path in enumerate(service.index.videos) if path.endswith(record.path.rsplit("/", 1)[-1]))
    with LiveServer(service) as server:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: "24 videos indexed" in b.find_element(By.ID, "status").text)
        browser.find_element(By.ID, "query").send_keys(concat_query(record.descriptions))
        first_id = 'return document.querySelector("#results .result")?.dataset.id'
        wait.until(lambda b: b.execute_script(first_id) == str(expected))
        first = browser.find_element(By.CSS_SELECTOR, "#results .result")
        image = first.find_element(By.TAG_NAME, "img")
        assert f"/thumbnail/{expected}?t=" in image.get_attribute("src")
        wait.until(lambda b: b.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image))
        assert first.find_element(By.CSS_SELECTOR, ".time").text  # the moment's time is shown
        first.click()
        video = browser.find_element(By.ID, "video")
        assert video.get_attribute("src").endswith(f"/video/{expected}")
        moment = service.search(MediaItem(text=concat_query(record.descriptions)), 1, None, "")["results"][0]["moment"]
        assert moment["start"] > 0  # playing from it needs a seek (a range request)
        wait.until(lambda b: b.execute_script("return arguments[0].readyState", video) >= 1)
        wait.until(lambda b: b.execute_script("return arguments[0].currentTime", video) >= moment["start"] - 0.05)
        assert browser.execute_script("return arguments[0].currentTime", video) < moment["end"]


def test_picking_a_video_with_text_typed_sends_what_the_model_embeds(corpus, tmp_path, browser):
    """The annotation model embeds T and V queries but not TV: the page searches with the video
    alone and says so, where it used to send both and show the server's 422."""
    service = make_service(corpus, tmp_path / "index", tmp_path / "cache")
    with LiveServer(service) as server:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda b: "24 videos indexed" in b.find_element(By.ID, "status").text)
        caption = concat_query(load_annotations(corpus / "annotations.json")[0].descriptions)
        browser.find_element(By.ID, "query").send_keys(caption)  # another video's caption
        picker = browser.find_element(By.ID, "file")
        assert picker.get_attribute("accept") == "video/*"  # the model embeds videos, not images
        picker.send_keys(service.index.videos[7])
        first_id = 'return document.querySelector("#results .result")?.dataset.id'
        wait.until(lambda b: b.execute_script(first_id) == "7")
        status = browser.find_element(By.ID, "status")
        assert "video alone" in status.text and status.get_attribute("class") != "error"
