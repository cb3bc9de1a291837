"""Text as readers see it: markup stripped to its text, HTML entities decoded.

WordPress stores an author's title and excerpt filtered (``wp_filter_kses``: ``&`` as
``&amp;``, ``<`` as ``&lt;``, tags it does not allow dropped with their text kept) and a theme
renders what is stored; so the gateway compares and shows such text only as readers see it.
nh3 (the Rust ``ammonia`` sanitizer) strips every tag; :func:`html.unescape` decodes HTML5's
named and numeric references (``&amp;``, ``&#038;``, ``&#x1f389;``).
"""

from __future__ import annotations

import html

import nh3


def plain(text: str, keep_script_text: bool = False) -> str:
    """``text`` (HTML or plain) as plain text: every tag removed, entities decoded.
    ``keep_script_text``: keep the content of ``<script>`` and ``<style>`` as text too, as
    ``wp_kses`` does to a tag it does not allow (a comparison with what WordPress stored);
    otherwise their content goes too (what a reader is shown)."""
    dropped = set() if keep_script_text else {"script", "style"}
    return html.unescape(nh3.clean(text, tags=set(), clean_content_tags=dropped))
