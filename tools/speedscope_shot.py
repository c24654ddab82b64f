"""Open a pprof profile in speedscope (the npm package, a local copy) in
headless Chromium, save a screenshot, and print the functions of its
sandwich view, heaviest first, one a line.

    .venv/bin/python tools/speedscope_shot.py PROFILE.pb.gz OUT.png [--view sandwich|time]

The profile is handed over as the speedscope command does: a script that
calls ``speedscope.loadFileFromBase64``, named in the page's
``#localProfilePath``.  Nothing is fetched from the network.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import tempfile
from pathlib import Path

from phasewatch.formats.outputs import open_output

REPO = Path(__file__).resolve().parents[1]
SPEEDSCOPE = REPO / ".venv" / "node_modules" / "speedscope" / "dist" / "release" / "index.html"
CHROMIUM = "/usr/bin/chromium"
VIEW_KEYS = {"time": "1", "sandwich": "3"}
LOAD_TIMEOUT_MS = 30_000


def sandwich_functions(page) -> list[str]:
    """Symbol names of the sandwich table: rows of (total, self, name) after its header."""
    text = page.inner_text("body")
    lines = [line.strip() for line in text.split("Symbol Name", 1)[1].splitlines() if line.strip()]
    return lines[2::3]


def shoot(profile: Path, out: str, view: str, speedscope: Path) -> list[str]:
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory(prefix="speedscope-") as tmp:
        loader = Path(tmp, "load.js")
        data = base64.b64encode(profile.read_bytes()).decode()
        loader.write_text(f"speedscope.loadFileFromBase64({json.dumps(profile.name)}, "
                          f"{json.dumps(data)})")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            try:
                page = browser.new_context(offline=True, viewport={"width": 1000, "height": 360}
                                           ).new_page()
                page.goto(f"file://{speedscope}#localProfilePath={loader}")
                page.wait_for_function(f"document.title.startsWith({json.dumps(profile.name)})",
                                       timeout=LOAD_TIMEOUT_MS)
                page.keyboard.press(VIEW_KEYS["sandwich"])
                page.wait_for_selector("text=Symbol Name", timeout=LOAD_TIMEOUT_MS)
                functions = sandwich_functions(page)
                page.keyboard.press(VIEW_KEYS[view])
                png = page.screenshot()
            finally:
                browser.close()
    with open_output(out, inputs=[str(profile)], binary=True) as output:
        output.stream.write(png)
    return functions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("out", metavar="OUT.png")
    parser.add_argument("--view", choices=sorted(VIEW_KEYS), default="sandwich")
    parser.add_argument("--speedscope", type=Path, default=SPEEDSCOPE,
                        help=f"speedscope's index.html (default {SPEEDSCOPE}; make install)")
    args = parser.parse_args()
    for path, fix in ((args.speedscope, "make install (npm install speedscope)"),
                      (Path(CHROMIUM), "apt-get install chromium")):
        if not path.exists():
            print(f"speedscope_shot: {path} is missing: {fix}", file=sys.stderr)
            return 2
    print("\n".join(shoot(args.profile, args.out, args.view, args.speedscope)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
