#!/usr/bin/env python3
"""The chat page `tandem serve` answers at / (tools/serve/page/), with
SmolLM2-135M-Instruct on loopback.

  test_chat_page.py http     GET / and its files: status, content type,
                             Content-Security-Policy, no outside host named
                             in them; under --api-key the page needs no key
                             while every API route still does.
  test_chat_page.py browser  headless Chromium (selenium): type a message,
                             send, wait for the streamed reply and its tok/s,
                             stop a reply, reload (the conversation is still
                             there), new chat; again under --api-key with the
                             key field. A screenshot goes to the temp dir and,
                             when TANDEM_SCREENSHOT_DIR is set, there too.

Exit 0: passed; 77: skipped (the binary, the model, Chromium, chromedriver
or selenium is missing: said why); 1: failed. Every wait is bounded.
"""
import json
import os
import re
import shutil
import sys
import tempfile
import time

from serve_harness import BINARY, SANITIZED, SKIP, Checks, Server, serve_test_inputs, skip

MAX_TOKENS = 40 if SANITIZED else 100
KEY = "sesame-42"
check = Checks()


def page_server(model, tmp, *args):
    """One slot of 2048 positions, its log in tmp."""
    return Server(model, "-np", "1", "-c", "2048", "-t", "2", *args, tmp=tmp)


# ---------------------------------------------------------------- http

def page_checks(server):
    """GET / and every file it names, without a key."""
    st, h, body = server.exchange("GET", "/")
    check(st == 200, f"GET / without a key: 200 (got {st}: {body[:200]!r})")
    check(h.get("content-type", "").startswith("text/html"), f"GET /: text/html (got {h.get('content-type')!r})")
    csp = h.get("content-security-policy", "")
    check("default-src 'none'" in csp, f"GET /: a Content-Security-Policy with default-src 'none' (got {csp!r})")
    for directive in ("script-src", "style-src", "connect-src"):
        m = re.search(rf"{directive} ([^;]*)", csp)
        check(m is not None and m.group(1).split() == ["'self'"],
              f"CSP {directive}: 'self' only (got {m.group(1) if m else None!r})")
    check("frame-ancestors 'none'" in csp, "CSP: frame-ancestors 'none'")
    check(not re.search(r"https?:|\*|'unsafe-", csp), f"CSP names no outside source nor unsafe-* ({csp!r})")
    check(h.get("x-content-type-options") == "nosniff", "GET /: X-Content-Type-Options: nosniff")
    html = body.decode("utf-8", "replace")
    check("<textarea id=\"input\"" in html and "id=\"send\"" in html, "GET /: the page has a message box and Send")
    st2, h2, body2 = server.exchange("GET", "/index.html")
    check(st2 == 200 and body2 == body and h2.get("content-security-policy") == csp,
          f"GET /index.html: the same page and policy (got {st2})")
    st, _, _ = server.exchange("HEAD", "/")
    check(st == 200, f"HEAD /: 200 (got {st})")
    # Everything the page loads: from this server, served without a key,
    # with a type the browser will run under nosniff.
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    check(any(r.endswith(".js") for r in refs) and any(r.endswith(".css") for r in refs),
          f"the page names its script and style sheet (found {refs})")
    texts = {"/": html}
    want_type = {".js": "text/javascript", ".css": "text/css"}
    for ref in refs:
        if ref.startswith("data:"):
            continue
        check(ref.startswith("/") and not ref.startswith("//"), f"{ref!r}: a path on this server")
        st, h, b = server.exchange("GET", ref)
        ext = os.path.splitext(ref)[1]
        check(st == 200, f"GET {ref} without a key: 200 (got {st})")
        check(h.get("content-type", "").startswith(want_type.get(ext, "?")),
              f"GET {ref}: {want_type.get(ext)} (got {h.get('content-type')!r})")
        texts[ref] = b.decode("utf-8", "replace")
    for ref, text in texts.items():
        outside = re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}", text)
        check(not re.search(r"https?://", text), f"{ref}: no http:// or https:// in it")
        check(not outside, f"{ref}: names no other host (found {outside[:3]})")
        check("@import" not in text and "url(" not in text, f"{ref}: imports nothing (no @import, no url())")


def http_main(model, tmp):
    server = page_server(model, tmp, "--api-key", KEY)
    try:
        page_checks(server)
        auth = {"Authorization": f"Bearer {KEY}"}
        chat = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
        # Every API route still asks for the key.
        for method, path, body in [("POST", "/v1/chat/completions", chat), ("GET", "/v1/models", None),
                                   ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
                                   ("GET", "/metrics", None), ("GET", "/slots", None),
                                   ("POST", "/api/chat", {"model": "m", "messages": chat["messages"]}),
                                   ("POST", "/", chat), ("GET", "/chat.js/", None), ("GET", "/x/chat.js", None)]:
            st, _, b = server.exchange(method, path, body)
            check(st == 401, f"{method} {path} without a key: 401 (got {st}: {b[:120]!r})")
        st, _, b = server.exchange("POST", "/v1/chat/completions", chat, {"Authorization": "Bearer wrong"})
        check(st == 401, f"chat with a wrong key: 401 (got {st})")
        # The page's tok/s: a streamed reply's usage chunk carries the
        # server's timings.
        st, h, b = server.exchange("POST", "/v1/chat/completions",
                                   dict(chat, stream=True, stream_options={"include_usage": True}), auth)
        check(st == 200 and h.get("content-type", "").startswith("text/event-stream"),
              f"streamed chat with the key: 200 event-stream (got {st})")
        events = [json.loads(line[6:]) for line in b.decode().splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        last = events[-1] if events else {}
        check("usage" in last and last["usage"]["completion_tokens"] > 0, f"the last chunk has usage ({last})")
        t = last.get("timings", {})
        check(t.get("predicted_ms", -1) >= 0 and t.get("prompt_ms", -1) >= 0,
              f"the usage chunk has timings.predicted_ms and prompt_ms ({t})")
        text = "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e.get("choices"))
        check(text.strip() != "", "the streamed reply has text")
    finally:
        server.stop()


# ---------------------------------------------------------------- browser

def find_browser():
    """(chromium, chromedriver, selenium module) or the reason to skip."""
    chromium = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                     if shutil.which(n)), None)
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver") if os.path.exists(p)), None)
    if not chromium:
        return None, "Chromium is not installed (apt-get install chromium)"
    if not driver:
        return None, "chromedriver is not installed (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, "the selenium Python package is not installed (pip install selenium)"
    return (chromium, driver), None


def open_browser(found, profile):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium, driver = found
    # The browser and its driver are given: Selenium Manager looks nothing up.
    os.environ.setdefault("SE_OFFLINE", "true")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    o = webdriver.ChromeOptions()
    o.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1100,900", f"--user-data-dir={profile}", "--no-first-run",
                "--disable-background-networking", "--disable-extensions"):
        o.add_argument(arg)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=driver), options=o)
    d.set_page_load_timeout(30)
    d.set_script_timeout(30)
    return d


def wait_for(what, cond, timeout):
    """cond() until it is truthy or timeout seconds pass; its last value."""
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        try:
            value = cond()
        except Exception:  # an element replaced while it was read: try again
            value = None
        if value:
            return value
        time.sleep(0.1)
    check(False, f"{what} within {timeout} s")
    return value


def q(d, css):
    from selenium.webdriver.common.by import By
    return d.find_elements(By.CSS_SELECTOR, css)


def el(d, id_):
    from selenium.webdriver.common.by import By
    return d.find_element(By.ID, id_)


def messages(d):
    """[(role, text, stats)] as shown."""
    return d.execute_script("""
        return [...document.querySelectorAll('#messages .msg')].map(m => [
            m.classList.contains('user') ? 'user' : 'assistant',
            m.querySelector('.bubble').textContent, m.querySelector('.stats').textContent]);""")


def busy(d):
    return el(d, "stop").is_displayed()


def send(d, text):
    box = el(d, "input")
    box.clear()
    box.send_keys(text)
    el(d, "send").click()


def reply_done(d, n):
    """The n-th message (an assistant reply) when it is complete: text, a tok/s figure, Stop gone."""
    ms = messages(d)
    if busy(d) or len(ms) <= n:
        return None
    role, text, stats = ms[n]
    return (role, text, stats) if role == "assistant" and text.strip() and "tok/s" in stats else None


def set_field(d, id_, value):
    f = el(d, id_)
    f.clear()
    f.send_keys(value)


def severe_logs(d):
    try:
        return [e["message"] for e in d.get_log("browser") if e.get("level") == "SEVERE"]
    except Exception:
        return []


def plain_run(d, server, tmp):
    """No key: send, stream, tok/s, escaping, stop, reload, screenshot, new chat."""
    d.get(server.url("/"))
    check(d.title == "Tandem chat", f"the page's title (got {d.title!r})")
    check(wait_for("the model's name in the bar", lambda: el(d, "model").text, 20) not in (None, ""),
          "the bar shows the model's name")
    check(not el(d, "notice").is_displayed(), "no notice without --api-key")
    el(d, "toggle-settings").click()
    check(el(d, "settings").is_displayed(), "Settings opens the settings")
    set_field(d, "temperature", "0")
    set_field(d, "max-tokens", str(MAX_TOKENS))
    el(d, "toggle-settings").click()

    question = "Give me three tips for a good night's sleep."
    start = time.time()
    send(d, question)
    got = wait_for("the streamed reply with its tok/s", lambda: reply_done(d, 1), 120)
    print(f"first reply in {time.time() - start:.1f} s: {got}", flush=True)
    if not got:
        return
    ms = messages(d)
    check(tuple(ms[0][:2]) == ("user", question), f"the user's message is shown (got {ms[0]})")
    check(re.search(r"\d+(\.\d+)? tok/s", got[2]) is not None, f"a tok/s figure under the reply (got {got[2]!r})")
    n_tokens = int(re.match(r"(\d+) token", got[2]).group(1)) if re.match(r"(\d+) token", got[2]) else 0
    check(0 < n_tokens <= MAX_TOKENS, f"the reply kept to max tokens {MAX_TOKENS} from the settings (got {got[2]!r})")

    # Markup typed by the user is shown as text, never parsed.
    markup = "<b>bold</b><img src=x onerror=\"document.title='pwned'\"> 2+2?"
    send(d, markup)
    wait_for("the second reply", lambda: reply_done(d, 3), 120)
    check(messages(d)[2][1] == markup, "markup in a message is shown as its text")
    check(not q(d, "#messages b, #messages img"), "no element made from a message's text")
    check(d.title == "Tandem chat", "no script ran from a message's text")

    # Stop: a long reply, stopped once its first words are on the page
    # (which shows it is rendered as it streams).
    set_field_in_settings(d, "max-tokens", "1500")
    send(d, "Count from 1 to 1000, one number a line.")
    partial = wait_for("the long reply's first words while it streams",
                       lambda: busy(d) and len(messages(d)) > 5 and messages(d)[5][1].strip(), 60)
    if partial and busy(d):
        el(d, "stop").click()
        stopped = wait_for("Stop to end the reply", lambda: not busy(d) and "stopped" in messages(d)[5][2], 10)
        if stopped:
            check(0 < len(messages(d)[5][1]) < 4000, "a stopped reply keeps what came before Stop")
    else:
        print("NOTE: the long reply ended before Stop could be pressed; Stop untested", flush=True)
    wait_for("the page to be idle", lambda: not busy(d), 120)

    before = messages(d)
    d.refresh()
    after = wait_for("the conversation after a reload", lambda: messages(d) if len(messages(d)) == len(before)
                     else None, 20)
    check(after == before, f"a reload keeps the conversation ({len(before)} messages; got {after})")
    check(el(d, "max-tokens").get_attribute("value") == "1500" and
          el(d, "temperature").get_attribute("value") == "0", "a reload keeps the settings")
    shot = os.path.join(tmp, "chatpage.png")
    d.save_screenshot(shot)
    check(os.path.getsize(shot) > 1000, "a screenshot was taken")
    print(f"screenshot: {shot}", flush=True)
    if os.environ.get("TANDEM_SCREENSHOT_DIR"):
        os.makedirs(os.environ["TANDEM_SCREENSHOT_DIR"], exist_ok=True)
        shutil.copy(shot, os.path.join(os.environ["TANDEM_SCREENSHOT_DIR"], "chatpage.png"))

    el(d, "new-chat").click()
    check(wait_for("New chat to clear the page", lambda: not messages(d), 5) is not None, "New chat clears it")
    d.refresh()
    wait_for("the page after a reload", lambda: q(d, "#messages .empty"), 20)
    check(not messages(d), "a new chat stays empty after a reload")
    bad = [m for m in severe_logs(d) if "favicon" not in m]
    check(not bad, f"no errors in the browser's console (got {bad[:3]})")


def set_field_in_settings(d, id_, value):
    if not el(d, "settings").is_displayed():
        el(d, "toggle-settings").click()
    set_field(d, id_, value)
    el(d, "toggle-settings").click()


def keyed_run(d, server):
    """--api-key: the page loads without it, says it needs one, and works once it is given."""
    d.get(server.url("/"))
    note = wait_for("the notice asking for the key", lambda: el(d, "notice").is_displayed() and el(d, "notice").text,
                    20)
    check(note and "API key" in note, f"without a key the page asks for it (got {note!r})")
    check(el(d, "api-key").is_displayed(), "the key field is shown")
    set_field(d, "max-tokens", "24")
    send(d, "Hello!")
    note = wait_for("the 401 notice", lambda: not busy(d) and el(d, "notice").is_displayed() and el(d, "notice").text,
                    30)
    check(note and "needs an API key" in note, f"a send without the key says the key is needed (got {note!r})")
    check(not messages(d), "the refused message is not kept in the conversation")
    check(el(d, "input").get_attribute("value") == "Hello!", "the refused message goes back into the box")
    set_field(d, "api-key", "wrong")
    el(d, "send").click()
    note = wait_for("the wrong-key notice", lambda: not busy(d) and "refused" in el(d, "notice").text, 30)
    check(note, f"a wrong key is said to be refused (got {el(d, 'notice').text!r})")
    set_field(d, "api-key", KEY)
    el(d, "send").click()
    got = wait_for("the reply with the key", lambda: reply_done(d, 1), 120)
    check(got is not None, "with the key the reply streams and shows tok/s")
    check(not el(d, "notice").is_displayed(), "the notice is gone once the key works")
    d.refresh()
    wait_for("the conversation after a reload", lambda: len(messages(d)) == 2, 20)
    check(el(d, "api-key").get_attribute("value") == KEY, "the key is kept in the browser")
    time.sleep(0.5)  # the page asks /v1/models with the stored key
    check(not el(d, "notice").is_displayed(), "a reload with the stored key asks for nothing")


def browser_main(model, tmp):
    found, why = find_browser()
    if why:
        return skip(why)
    start = time.time()
    for keyed in (False, True):
        server = page_server(model, tmp, *(["--api-key", KEY] if keyed else []))
        d = None
        try:
            d = open_browser(found, os.path.join(tmp, f"profile-{int(keyed)}"))
            keyed_run(d, server) if keyed else plain_run(d, server, tmp)
        finally:
            if d is not None:
                d.quit()
            server.stop()
    print(f"browser runs: {time.time() - start:.1f} s", flush=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("http", "browser"):
        print("usage: test_chat_page.py http|browser")
        return 2
    model, why = serve_test_inputs(BINARY, need_openai=False)
    if why:
        return skip(why)
    tmp = tempfile.mkdtemp(prefix="tandem-chatpage-")
    rc = (http_main if mode == "http" else browser_main)(model, tmp)
    if rc == SKIP:
        return SKIP
    print(f"{check.summary()} (logs in {tmp})")
    return check.exit_code()


if __name__ == "__main__":
    check.run(main)  # a failed start or a lost browser counts as a failure
