"""The JSON the HTML lab report embeds: safe with hostile strings (it cannot end its script block).
What headless Chromium shows of the report: tests/live/test_html.py."""
import json

from memgap.report.html import safe_json

HOSTILE = '</script><b id="pwn">x</b>\u2028&amp;'


def test_safe_json_cannot_break_out_of_its_script_block():
    data = {"cmd": ["python", HOSTILE], "n": 1}
    text = safe_json(data)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == data
