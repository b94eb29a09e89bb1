"""Headless Chromium driven over the DevTools protocol, for tests that look at pages as a
browser shows them: open a tab (in a browser context of its own, optionally through a proxy),
load a page, wait until it and everything it asked for has settled, record every request it
made with the answer it got, and take a screenshot.

Chromium is Debian's (`.ci/run` installs it); `chromium()` is None when it is missing, and the
caller skips with that reason.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from conftest import until

WIDTH, HEIGHT = 800, 600  # the viewport every screenshot is taken at, device scale 1


def chromium() -> str | None:
    """Path of a Chromium binary, if one is installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Request:
    """One request a page made, with the answer it got (status 0: no answer)."""

    url: str
    status: int = 0
    mime: str = ""
    failure: str = ""  # Network.loadingFailed's errorText
    done: bool = False


class Tab:
    """One page target's DevTools connection: calls answered by id, events kept in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._calls = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        """Route each message: an answer to its call, an event to the list."""
        async for msg in self.ws:
            data = json.loads(msg.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None:
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result, or RuntimeError with the protocol's error."""
        self._calls += 1
        future = asyncio.get_running_loop().create_future()
        self._waiting[self._calls] = future
        await self.ws.send_json({"id": self._calls, "method": method, "params": params})
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    async def close(self) -> None:
        """Stop reading and close the connection."""
        self._reader.cancel()
        await self.ws.close()

    def requests(self) -> dict[str, Request]:
        """The requests seen in the events since the last `load`, by DevTools request id (a
        redirect keeps its id: the last hop is kept)."""
        seen: dict[str, Request] = {}
        for e in self.events:
            p = e["params"]
            if e["method"] == "Network.requestWillBeSent":
                seen[p["requestId"]] = Request(p["request"]["url"])
            elif (r := seen.get(p.get("requestId", ""))) is None:
                continue
            elif e["method"] == "Network.responseReceived":
                r.status, r.mime = p["response"]["status"], p["response"]["mimeType"]
            elif e["method"] == "Network.loadingFinished":
                r.done = True
            elif e["method"] == "Network.loadingFailed":
                r.failure, r.done = p["errorText"], True
        return seen

    async def load(self, url: str, timeout: float = 30) -> list[Request]:
        """Navigate to `url` and wait until the page's network is idle (Chromium's
        `networkIdle`: no request for 500 ms, so what starts after the load event, such as
        the icon, is in), every request it made has ended and two frames were painted: the
        requests, in the order they were made."""
        self.events.clear()
        loader = (await self.call("Page.navigate", url=url))["loaderId"]

        def idle() -> bool:  # of this navigation's document, not the one before
            return any(e["method"] == "Page.lifecycleEvent" and e["params"]["loaderId"] == loader
                       and e["params"]["name"] == "networkIdle" for e in self.events)

        await until(idle, f"the network of {url} idle", timeout=timeout)
        await until(lambda: all(r.done for r in self.requests().values()),
                    f"every request of {url} answered", timeout=timeout)
        await self.call("Runtime.evaluate", awaitPromise=True, expression=(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"))
        return list(self.requests().values())

    async def screenshot(self) -> bytes:
        """The viewport as a PNG."""
        shot = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


class Browser:
    """A headless Chromium with its DevTools port; an async context manager that kills it."""

    def __init__(self, binary: str, profile: Path, *args: str) -> None:
        self.binary, self.profile, self.args = binary, profile, args
        self.proc: asyncio.subprocess.Process | None = None
        self.port = ""
        self.session: aiohttp.ClientSession | None = None
        self.browser: Tab | None = None
        self.tabs: list[Tab] = []

    async def __aenter__(self) -> Browser:
        """Start Chromium and connect to its browser target."""
        self.proc = await asyncio.create_subprocess_exec(
            self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", "--mute-audio", f"--user-data-dir={self.profile}",
            "--remote-debugging-port=0", *self.args, "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            active = self.profile / "DevToolsActivePort"
            await until(lambda: active.exists() and len(active.read_text().split()) == 2,
                        "Chromium's DevTools port")
            self.port = active.read_text().split()[0]
            self.session = aiohttp.ClientSession()
            async with self.session.get(f"http://127.0.0.1:{self.port}/json/version") as r:
                ws_url = (await r.json())["webSocketDebuggerUrl"]
            self.browser = Tab(await self.session.ws_connect(ws_url, max_msg_size=0))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the connections; Chromium takes its helper processes down with it."""
        for tab in [*self.tabs, *([self.browser] if self.browser else [])]:
            await tab.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    async def tab(self, proxy: str | None = None) -> Tab:
        """A new tab in a browser context of its own (its own cache and cookies), through
        `proxy` (host:port) when given; the network recorded, the cache off, the viewport
        WIDTH x HEIGHT."""
        assert self.browser is not None and self.session is not None
        context = await self.browser.call("Target.createBrowserContext", **(
            {"proxyServer": f"http://{proxy}", "proxyBypassList": "<-loopback>"}
            if proxy else {}))
        target = await self.browser.call("Target.createTarget", url="about:blank",
                                         browserContextId=context["browserContextId"])
        tab = Tab(await self.session.ws_connect(
            f"ws://127.0.0.1:{self.port}/devtools/page/{target['targetId']}", max_msg_size=0))
        self.tabs.append(tab)
        for method in ("Page.enable", "Network.enable"):
            await tab.call(method)
        await tab.call("Page.setLifecycleEventsEnabled", enabled=True)
        await tab.call("Network.setCacheDisabled", cacheDisabled=True)
        await tab.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
                       deviceScaleFactor=1, mobile=False)
        return tab
