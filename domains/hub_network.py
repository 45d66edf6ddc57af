"""The Hugging Face hub without a network. ``datasets`` asks the hub for each file of a dataset named by its hub id,
retrying each request five times over about 25 s and printing every retry, before it fails or falls back to its
cache. Where the hub's host does not resolve and no proxy would reach it, :func:`offline_without_network` puts
``datasets`` in its offline mode for the call: it reads its cache at once, or fails in one line."""

from __future__ import annotations

import contextlib
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_host() -> str:
    """The host ``datasets`` asks: ``HF_ENDPOINT``'s, else huggingface.co."""
    return urllib.parse.urlparse(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).hostname or "huggingface.co"


def hub_unreachable() -> bool:
    """Whether the hub's host does not resolve here, with no proxy configured (a proxy may resolve what the
    machine cannot)."""
    if urllib.request.getproxies():
        return False
    try:
        socket.getaddrinfo(hub_host(), 443)
    except OSError:
        return True
    return False


@contextlib.contextmanager
def offline_without_network() -> Iterator[bool]:
    """Within: ``datasets`` and ``huggingface_hub`` in offline mode where :func:`hub_unreachable`; yields whether
    they are (for the caller's message). The modes are put back after."""
    if not hub_unreachable():
        yield False
        return
    import datasets.config
    import huggingface_hub.constants

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def no_network_note() -> str:
    return f"no network: {hub_host()} does not resolve, so only datasets' cache was read"
