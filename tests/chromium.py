"""Real headless Chromium (Debian's ``/usr/bin/chromium``, no browser download) driven over the DevTools
protocol: open a page, run JavaScript in it (clicks, reads), wait for a condition, take a screenshot.

:func:`chromium_binary` finds the browser; a test calls ``require(chromium_binary() is not None, ...)`` so
that CI (where ``.ci/run`` installs it) fails when it is missing. Waiting is by condition, polled a bounded
number of times, never by a fixed sleep standing in for a result.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--window-size=1280,900")


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page, controlled through its DevTools websocket."""

    def __init__(self, profile: Path) -> None:
        import websocket  # the `test` extra's websocket-client

        binary = chromium_binary()
        if binary is None:
            raise RuntimeError("chromium is not installed")
        self.proc = subprocess.Popen([binary, *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        endpoint = None
        for line in self.proc.stderr:  # Chromium prints its DevTools address once it listens
            match = re.search(r"DevTools listening on ws://([^/]+)/", line)
            if match:
                endpoint = match.group(1)
                break
        if endpoint is None:
            self.proc.kill()
            raise RuntimeError("chromium printed no DevTools address")
        pages = [t for t in httpx.get(f"http://{endpoint}/json/list", timeout=30).json() if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self._ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, *, tries: int = 600, pause: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy (at most ``tries`` times); its value, or AssertionError."""
        value = None
        for _ in range(tries):
            try:
                value = self.js(expression)
            except RuntimeError:  # the page is navigating: its context is gone for a moment
                value = None
            if value:
                return value
            time.sleep(pause)
        raise AssertionError(f"never true in the page: {expression} (last value {value!r}, "
                             f"url {self.js('location.href')})")

    def open(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def click(self, selector: str) -> None:
        """Click the element ``selector`` names (a navigation it starts is waited for by the caller)."""
        found = self.js(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); "
                        "if (!el) return false; el.click(); return true; })()")
        assert found, f"no element {selector} on {self.js('location.href')}"

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
