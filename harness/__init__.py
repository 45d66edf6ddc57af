"""The ``harness`` command: runs, records, leaderboards, cross-modality reports and regression tracking.

It knows nothing about the inside of a domain: it resolves a :class:`domains.base.RunSpec`, calls the
domain's ``pretrain`` and ``evaluate``, and keeps one self-describing JSON record per run.
"""
