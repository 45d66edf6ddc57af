"""Names in records are the user's free text: the generated pages print them literally, never as a link, HTML,
emphasis, code or strikethrough. Checked by rendering each page with markdown-it-py (CommonMark with GitHub's tables
and strikethrough), a renderer independent of the escaping, and looking at what it made of the names."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt
from tiny_domain import synthetic_record, write_records

from harness.cli import main
from harness.tables import Markup, bullet, code, escape, markdown

# Each piece is one thing markdown or HTML acts on: a link, a tag, emphasis both ways, a code span, strikethrough,
# math (GitHub's), an entity, a heading's closing sequence.
ACTIVE = "[x](http://evil) <b>b</b> *e* _u_ `c` ~~s~~ $m$ &lt; #"
RENDERER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _html(page: str) -> str:
    return RENDERER.render(page)


def _literal(name: str) -> str:
    """How a renderer prints ``name`` as text: its characters, HTML-escaped as text is."""
    return html.escape(name, quote=False)


def _assert_nothing_rendered(page: str, where: str) -> None:
    out = _html(page)
    assert "evil" not in " ".join(re.findall(r'href="([^"]*)"', out)), where  # the name's link is text
    assert re.search(r"<b>|<em>[eu]</em>|<code>c</code>|<s>s</s>", out) is None, where
    outside_code = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", page)  # a code span is literal, its $ too
    assert re.search(r"(?<!\\)\$", outside_code) is None, where  # GitHub's math: $m$ would be typeset


def _records(version: str = "a", date: str = "2026-01-01T00:00:00+00:00") -> list[dict]:
    software = {"source_digest": version * 64, "git_commit": version * 40, "git_commit_date": date}
    records = []
    for seed, value in enumerate([80.0, 82.0, 81.0]):
        common = {"dataset": f"data {ACTIVE}", "method": f"method {ACTIVE}", "preset": f"preset {ACTIVE}",
                  "metric": f"metric {ACTIVE}", "overrides": {f"over {ACTIVE}": f"ride {ACTIVE}"},
                  "software": software}
        records.append(synthetic_record("infonce", seed, value, **common))
        records.append(synthetic_record(f"loss {ACTIVE}", seed, value + 3 + seed / 10,
                                        loss_params={f"key {ACTIVE}": f"value {ACTIVE}"}, **common))
    for record in records:  # a plain, short file name
        record["run_id"] = f"tiny-{'infonce' if record['loss'] == 'infonce' else 'odd'}-{version}-s{record['seed']}"
    return records


def test_names_with_markdown_and_html_print_literally_on_every_page(tmp_path):
    results, out = tmp_path / "results", tmp_path / "out"
    write_records(results, _records("a") + _records("b", "2026-02-01T00:00:00+00:00"))
    for command in ("leaderboard", "report", "history"):
        assert main([command, "--results", str(results), "--out", str(out)]) == 0, command
    pages = {name: (out / name).read_text() for name in ("tiny.md", "README.md", "report.md", "history.md")}
    for name, page in pages.items():
        _assert_nothing_rendered(page, name)
    tiny, index = _html(pages["tiny.md"]), _html(pages["README.md"])
    for text in (f"method {ACTIVE}", f"loss {ACTIVE}", f"key {ACTIVE}=value {ACTIVE}",
                 f"preset {ACTIVE} (over {ACTIVE}=ride {ACTIVE}), 3 epochs", f"metric {ACTIVE}", f"data {ACTIVE}"):
        cells = {f"<td>{_literal(text)}</td>", f"<th>{_literal(text)}</th>"}
        assert any(c in index for c in cells), text
        assert any(c in tiny for c in cells) or text == f"data {ACTIVE}", text  # the dataset heads its table
    assert f"<h2>{_literal(f'data {ACTIVE}')}</h2>" in tiny  # '#' at its end is no closing sequence
    assert f"<code>{_literal(f'metric {ACTIVE}')}</code>" in tiny  # the prose's code span holds the name whole
    assert re.search(r'<a href="[^"]*-b-s0\.json">s0</a>', tiny)  # the record links the page built still work
    assert '<a href="tiny.md">tiny</a>' in index and "<strong>" in tiny  # so do its own link and bold
    assert _literal(f"tiny/data {ACTIVE}/method {ACTIVE}/preset {ACTIVE}") in _html(pages["report.md"])
    assert f"<h2>{_literal(f'tiny / data {ACTIVE} / method {ACTIVE} / loss {ACTIVE}')}" in _html(pages["history.md"])


def test_the_prior_page_prints_its_folder_name_literally(tmp_path):
    results = tmp_path / "results `[x](evil) <b>b *e*"  # a folder's name holds no "/"
    records = [synthetic_record("infonce", s, 80.0 + s, dataset=f"data {ACTIVE}") for s in range(2)]
    for record in records:
        record["run_id"] = f"tiny-infonce-s{record['seed']}"
    write_records(results, records)
    assert main(["prior", "--results", str(results), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "prior.md").read_text()
    _assert_nothing_rendered(page, "prior.md")
    assert f"<code>{_literal(results.name)}</code>" in _html(page)


@pytest.mark.parametrize("name, escaped", [
    ("eps_supinfonce", "eps_supinfonce"),  # inside a word an underscore is inert: the committed pages keep bytes
    ("tau_plus=0.1, c=0.01", "tau_plus=0.1, c=0.01"),
    ("a <= 3 & b", "a <= 3 & b"),  # no tag, no entity: as it is
    ("C# and x_", "C# and x\\_"),
    ("_x_ __init__", "\\_x\\_ \\_\\_init\\_\\_"),
    ("a\\*b", "a\\\\\\*b"),  # a backslash of the name is no escape of ours
])
def test_escape_changes_only_what_markdown_would_act_on(name, escaped):
    assert escape(name) == escaped
    assert RENDERER.renderInline(escaped) == _literal(name)


def test_a_cell_is_text_unless_the_page_built_it_as_markup():
    [_, _, row] = markdown(["a", "b"], [[f"*{ACTIVE}*", Markup(f"**{escape('x|y')}**")]])
    assert row == ("| \\*[x\\](http://evil) \\<b>b\\</b> \\*e\\* \\_u\\_ \\`c\\` \\~\\~s\\~\\~ \\$m\\$ \\&lt; \\#\\* "
                   "| **x\\|y** |")
    assert "<strong>x|y</strong>" in _html("\n".join(markdown(["a", "b"], [["1", Markup("**x|y**")]])))


@pytest.mark.parametrize("text", ["accuracy", "a`b", "`a", "a``b`", " a ", "a|b"])
def test_a_code_span_holds_any_name_whole(text):
    assert RENDERER.renderInline(code(text)) == f"<code>{_literal(text)}</code>"



def test_a_code_span_in_prose_forges_no_line():
    """A code span's line break started a new line of the page: a bench file's device or command such as
    'cpu\\n# forged' printed a heading on the bench page (hardware_line), and '\\n- x' a bullet."""
    out = _html(f"device {code('cpu' + chr(10) + '# forged')}; command {code('run' + chr(10) + '- x')}.")
    assert "<h1>" not in out and "<li>" not in out
    assert out.count("<code>") == 2


@pytest.mark.parametrize("name", ["1. x", "2) x", "- x", "+ x", "---", "> x", ">x", "[ ] x", "[x] x", "   1. x"])
def test_a_bullet_starting_like_a_block_prints_its_name(name):
    """A record named like a list item, a quote, a thematic break or GitHub's task box, at the start of a page's
    bullet, rendered as a nested list, a quote, a rule or a checkbox (GitHub's; CommonMark prints "[ ] x")."""
    assert RENDERER.render(bullet(escape(name))) == f"<ul>\n<li>{_literal(name.lstrip())}</li>\n</ul>\n"


def test_the_comparison_report_prints_names_literally(tmp_path):
    """The gate's report (``--out``, a CI job's summary) named groups in bullets unescaped: a missing group's
    dataset ``[x](http://evil)`` was a link there, a config value a heading, and a folder's name broke its title."""
    def side(folder, config_value, groups):
        records = [synthetic_record("infonce", s, 80.0 + s, dataset=f"{prefix}data {ACTIVE}",
                                    config={"k": config_value}) for prefix in groups for s in range(3)]
        for record in records:
            record["run_id"] = f"tiny-{len(record['dataset'])}-s{record['seed']}"
        write_records(folder, records)
        return str(folder)

    base = side(tmp_path / "base `[x](evil) <b>b", f"value {ACTIVE}", ["", "1. "])
    cand = side(tmp_path / "cand", f"other {ACTIVE}", [""])
    out = tmp_path / "report.md"
    assert main(["compare", "--baseline", base, "--candidate", cand, "--out", str(out)]) == 1  # "1. " is missing
    page = out.read_text()
    _assert_nothing_rendered(page, "compare")
    rendered = _html(page)
    assert "<ol>" not in rendered and f"<code>{_literal(base)}</code>" in rendered
    assert f"tiny / 1. data {_literal(ACTIVE)} / linear / infonce" in rendered
    assert f"k: value {_literal(ACTIVE)} → other {_literal(ACTIVE)}" in rendered
