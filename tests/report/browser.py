"""A report page as a browser shows it: headless Chromium (Debian's ``chromium``) loads a
copy of ``report.html`` with a probe script, at a 1280-pixel-wide window, and the probe
writes into the page what it found after the load event:

* every ``<img>``: whether it loaded (``complete`` and a natural width above 0);
* every ``<table>``: its right edge against the page's width (a table wider than the
  window overflows it), its tallest row in lines of text (a column too narrow for its
  text makes rows many lines tall), and the page's own scroll width;
* every console error and uncaught error (a script error, a resource that failed).

``--dump-dom`` prints the page after its scripts ran; the probe's JSON is read back
from it. Used by the browser test of the reports (issue 31, item 8)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

WIDTH = 1280
MAX_ROW_LINES = 8   # a taller row is a column squeezed too narrow

_PROBE = """<script>
window.__d5_errors = [];
(function () {
  var original = console.error;
  console.error = function () {
    window.__d5_errors.push(Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
  window.addEventListener('error', function (e) {
    window.__d5_errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || '?'));
  }, true);
  window.addEventListener('load', function () {
    var width = document.documentElement.clientWidth;
    var found = {
      width: width,
      scroll_width: document.documentElement.scrollWidth,
      images: Array.prototype.map.call(document.images, function (img) {
        return {alt: img.getAttribute('alt') || '', loaded: img.complete && img.naturalWidth > 0};
      }),
      tables: Array.prototype.map.call(document.querySelectorAll('table'), function (t) {
        var caption = t.previousElementSibling ? t.previousElementSibling.textContent : '';
        var lines = Array.prototype.map.call(t.querySelectorAll('tbody tr'), function (row) {
          var cell = row.querySelector('td') || row;
          var line = parseFloat(getComputedStyle(cell).fontSize) * 1.25;
          return row.getBoundingClientRect().height / line;
        });
        return {right: t.getBoundingClientRect().right, before: caption.slice(0, 80),
                tallest_row_lines: Math.max.apply(null, lines.concat([0])),
                empty_header_rows: Array.prototype.filter.call(t.querySelectorAll('thead tr'),
                  function (row) { return row.textContent.trim() === ''; }).length};
      }),
      errors: window.__d5_errors
    };
    var pre = document.createElement('pre');
    pre.id = 'd5-browser-probe';
    pre.textContent = JSON.stringify(found);
    document.body.appendChild(pre);
  });
})();
</script>"""


def chromium() -> str | None:
    """The path of a Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def probe(report_html: str, timeout: float = 120.0) -> dict:
    """What the probe found in ``report_html`` (module docstring)."""
    folder = os.path.dirname(os.path.abspath(report_html))
    page = os.path.join(folder, "report.browser-probe.html")
    html = open(report_html, encoding="utf-8").read()
    head = re.search(r"<head[^>]*>", html, re.IGNORECASE)
    at = head.end() if head else 0
    with open(page, "w", encoding="utf-8") as stream:
        stream.write(html[:at] + _PROBE + html[at:])
    try:
        completed = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--window-size={WIDTH},900", "--virtual-time-budget=10000", "--dump-dom",
             "file://" + page],
            capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(page)
    found = re.search(r'<pre id="d5-browser-probe">(.*?)</pre>', completed.stdout, re.DOTALL)
    if not found:
        raise AssertionError(f"Chromium did not run the probe on {report_html} (exit "
                             f"{completed.returncode}): {completed.stderr[-2000:]}")
    text = (found.group(1).replace("&quot;", '"').replace("&lt;", "<")
            .replace("&gt;", ">").replace("&amp;", "&"))
    return json.loads(text)


def defects(found: dict) -> list[str]:
    """The probe's findings that a reader would see as broken."""
    problems = [f"image not loaded: {img['alt'] or '(no alt text)'}"
                for img in found["images"] if not img["loaded"]]
    width = found["width"]
    problems += [f"table after {t['before']!r} overflows the {width}-pixel page "
                 f"(its right edge at {t['right']:.0f})"
                 for t in found["tables"] if t["right"] > width + 1]
    problems += [f"table after {t['before']!r} has a row {t['tallest_row_lines']:.0f} lines "
                 f"tall" for t in found["tables"] if t["tallest_row_lines"] > MAX_ROW_LINES]
    problems += [f"table after {t['before']!r} has {t['empty_header_rows']} empty header "
                 f"row(s)" for t in found["tables"] if t["empty_header_rows"]]
    if found["scroll_width"] > width + 1:
        problems.append(f"the page scrolls sideways ({found['scroll_width']} > {width} px)")
    problems += [f"console: {message}" for message in found["errors"]]
    return problems
