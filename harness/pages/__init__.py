"""The generated pages: one module per page, sharing the groups of records (:mod:`harness.groups`), the table
cells (:mod:`harness.pages.tables`) and the figures (:mod:`harness.pages.figures`).

``leaderboard`` (``leaderboards/README.md``, a page per domain, ``records.txt``) with ``curves`` (the rows'
learning curves) and ``bench`` (``bench.md``), all written by ``harness leaderboard``; ``report``
(``harness report``), ``prior`` (``harness prior``; its runs in ``prior_runs``, its tables in ``prior_tables``),
``history`` (``harness history``). ``generated`` says which files at ``--out`` a page command may replace or
remove: only those a page command generated. A new page is one module here, its options in
``harness/parser.py`` and one branch in ``harness/command.py``.
"""
