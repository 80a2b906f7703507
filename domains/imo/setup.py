"""Fetch IMO-Bench from upstream at the pinned commit, or fall back to the bundled copy.

    python -m domains.imo.setup [--dest DIR] [--timeout S] [--raw-host URL]

The bundled copy lacks the full 1,000-row gradingbench.csv (only the curated
splits), which is what re-running `domains.imo.curate_subsets` needs. Offline,
the bundled copy is verified and used, and the command still succeeds.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from domains.imo.data import (
    DATA_DIR,
    SUMS_NAME,
    format_checksums,
    read_checksums,
    verify_folder,
)
from services.cli_parser import ArgumentParser
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_bytes, atomic_write_text

UPSTREAM_REPO = "google-deepmind/superhuman"
UPSTREAM_COMMIT = "c1ee02e03d4cdb2ab21cd01ac927d895f5287fc8"
UPSTREAM_FOLDER = "imobench"
# The files of imobench/ at the pinned commit; the *_v2 fixes came later.
UPSTREAM_FILES = ("gradingbench.csv", "proofbench.csv", "answerbench.csv")
RAW_HOST = "https://raw.githubusercontent.com"
DEFAULT_DEST = DATA_DIR / "upstream"
DEFAULT_TIMEOUT = 10.0


class DownloadError(Exception):
    """Upstream could not deliver a file; the bundled copy is used instead."""


def upstream_base_url(raw_host: str = RAW_HOST, repo: str = UPSTREAM_REPO, commit: str = UPSTREAM_COMMIT) -> str:
    """URL of the imobench/ folder at `commit` on a GitHub raw host (or a mirror laid out the same way)."""
    return f"{raw_host.rstrip('/')}/{repo}/{commit}/{UPSTREAM_FOLDER}"


def file_url(base_url: str, name: str) -> str:
    return f"{base_url.rstrip('/')}/{name}"


def fetch_url(url: str, timeout: float) -> bytes:
    """GET `url`; any network or HTTP failure becomes DownloadError with a one-line reason."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except urllib.error.HTTPError as e:
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise DownloadError(f"{url}: {e.reason}") from None
    except (OSError, http.client.HTTPException) as e:
        raise DownloadError(f"{url}: {e or type(e).__name__}") from None
    if not data:
        raise DownloadError(f"{url}: empty response")
    return data


def download_upstream(dest: str | Path, base_url: str | None = None, files: Iterable[str] = UPSTREAM_FILES,
                      timeout: float = DEFAULT_TIMEOUT,
                      fetch: Callable[[str, float], bytes] = fetch_url) -> dict[str, str]:
    """Download `files` from `base_url` into `dest` and record their sha256 in dest/SHA256SUMS.

    Everything is fetched before anything is written, so a failure part-way
    leaves `dest` as it was. Returns {file name: sha256} of the files written.
    """
    base_url = base_url or upstream_base_url()
    dest = Path(dest)
    payloads = {name: fetch(file_url(base_url, name), timeout) for name in files}
    checksums = {name: hashlib.sha256(data).hexdigest() for name, data in payloads.items()}
    try:
        for name, data in payloads.items():
            atomic_write_bytes(dest / name, data)
        # Merge, so files another step listed in the same folder keep their checksums.
        atomic_write_text(dest / SUMS_NAME, format_checksums({**read_checksums(dest), **checksums}))
    except OSError as e:
        raise UserError(f"cannot write the upstream files to {dest}: {e}") from None
    return checksums


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = ArgumentParser(prog="python -m domains.imo.setup", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--dest", type=Path, default=DEFAULT_DEST,
                   help=f"where the upstream files go (default: {DEFAULT_DEST})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per download before giving up and using the bundled copy "
                        f"(default: {DEFAULT_TIMEOUT:g})")
    p.add_argument("--raw-host", default=RAW_HOST,
                   help=f"GitHub raw host, or a mirror with the same layout (default: {RAW_HOST})")
    args = p.parse_args(argv)
    if args.timeout <= 0:
        raise UserError(f"--timeout must be positive, got {args.timeout:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base_url = upstream_base_url(args.raw_host)
    try:
        checksums = download_upstream(args.dest, base_url=base_url, timeout=args.timeout)
    except DownloadError as e:
        n = verify_folder(DATA_DIR)
        print(f"network unreachable ({e}); source: bundled copy at {DATA_DIR} "
              f"(verified: {n} files OK; curated splits only, no full gradingbench.csv)")
        return 0
    print(f"source: upstream {base_url} -> {args.dest} "
          f"({len(checksums)} files: {', '.join(checksums)}; sha256 recorded in {args.dest / SUMS_NAME})")
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
