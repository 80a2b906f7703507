"""The shapes a config value may take, beyond its type (services/config.py's rules use them): numbers
within a range, each error naming the bound crossed; Docker image references; host names, HOST:PORT and
URIs by scheme; model names and prices; printable text. Each is a test of a value already of its annotated
type, so none raises on what YAML or JSON can hold (a 400-digit integer is only compared, never converted)."""

from __future__ import annotations

import ipaddress
import re
import typing
from collections.abc import Callable
from urllib.parse import urlsplit

from services.plain_data import conforms

# A rule: (test, what is expected), the latter in words or, for a range, by the bound a value crossed.
Rule = tuple[Callable[[typing.Any], bool], "str | Callable[[typing.Any], str]"]


def between(low: float, high: float) -> Rule:
    """A number from `low` to `high`: every number of a config has a ceiling, so none can overflow a float
    or a C integer where it is used (a sandbox's limit, a sleep, a price)."""
    return (lambda v: low <= v <= high), lambda v: f"{low:g} or more" if v < low else f"at most {high:g}"


def above_up_to(low: float, high: float) -> Rule:
    return (lambda v: low < v <= high), lambda v: f"greater than {low:g}" if v <= low else f"at most {high:g}"


def count(high: int) -> Rule:
    return (lambda v: 1 <= v <= high), lambda v: "a positive integer" if v < 1 else f"at most {high:,}"


# Docker's image reference (the distribution project's grammar): [HOST[:PORT]/]PATH[:TAG][@DIGEST], where
# PATH is lower-case components joined by `/`, each alphanumeric runs joined by `.`, `_`, `__` or dashes.
_ALNUM = r"[a-z0-9]+"
_PATH_PART = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REGISTRY = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?"
DOCKER_REFERENCE = re.compile(rf"(?:{_REGISTRY}/)?{_PATH_PART}(?:/{_PATH_PART})*(?::\w[\w.-]{{0,127}})?"
                              r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
DOCKER_REFERENCE_MAX = 255  # Docker's own limit on a name; checked before the pattern
HOST_NAME = re.compile(rf"{_HOST_PART}(?:\.{_HOST_PART})*")
MODEL_NAME = re.compile(r"\S{1,256}")  # provider/name as litellm reads it: no space, no control


def is_host(text: str) -> bool:
    """An IP address or a DNS name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return len(text) <= 253 and HOST_NAME.fullmatch(text) is not None
    return True


def has_port(text: str) -> bool:
    """HOST:PORT, the port from 1 to 65535 ([V6]:PORT for an IPv6 address)."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return bool(sep) and port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535 \
        and is_host(host)


def uri(schemes: tuple[str, ...]) -> tuple[Callable[[str], bool], str]:
    """A URI whose scheme is one of `schemes`, with somewhere to go (a host or a path)."""
    def test(text: str) -> bool:
        try:
            parts = urlsplit(text)
        except ValueError:
            return False
        return parts.scheme in schemes and bool(parts.netloc or parts.path) and not any(c.isspace() for c in text)
    return test, f"a URI of scheme {', '.join(f'{s}://' for s in schemes)}"


def is_model(value: str) -> bool:
    return MODEL_NAME.fullmatch(value) is not None


DOCKER_IMAGE: Rule = (lambda v: len(v) <= DOCKER_REFERENCE_MAX and DOCKER_REFERENCE.fullmatch(v) is not None,
                      "a Docker image reference ([HOST[:PORT]/]NAME[:TAG][@DIGEST], the name in lower case)")
PRICES: Rule = (lambda v: all(is_model(k) and conforms(p, list[float]) and len(p) in (2, 4)
                              and all(0 <= x <= 1e6 for x in p) for k, p in v.items()),
                "model -> [usd per 1M input, usd per 1M output] or [input, output, cached read, cache write], each "
                "from 0 to 1e+06")
META_MODELS: Rule = (lambda v: is_model(v) if isinstance(v, str) else 2 <= len(v) <= 8 and len(set(v)) == len(v)
                     and all(is_model(m) and m != "auto" for m in v),
                     "a model, or a list of 2 to 8 distinct models (not auto)")


def bad_text(value: object, limit: int) -> str | None:
    """The first text in `value` (a field, or the keys and items of a list or mapping) that no field may
    hold: a control, bidi or other unprintable character (it would reach a terminal and a record as it is),
    or past `limit` characters."""
    if isinstance(value, str):
        return value if len(value) > limit or not value.isprintable() else None
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
    return next((bad for item in items if (bad := bad_text(item, limit)) is not None), None)


def one_of(*choices: str) -> Rule:
    return (lambda v: v in choices), "one of " + ", ".join(map(str, choices))


def stages(value: list | dict, rules: tuple[str, ...]) -> bool:
    """A stage list ([rows, above] or [rows, above, rule], rows growing), or domain name -> stage list."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, list) and _stage_list(v, rules) for k, v in value.items())
    return _stage_list(value, rules)


def _stage_list(value: list, rules: tuple[str, ...]) -> bool:
    # The bound on `above` is checked before anything makes a float of it: an integer of 400 digits has none.
    found = all(conforms(v, list) and len(v) in (2, 3) and type(v[0]) is int and 1 <= v[0] <= 10**7
                and conforms(v[1], float) and -1e9 <= v[1] <= 1e9 and (len(v) == 2 or v[2] in rules) for v in value)
    return found and all(a[0] < b[0] for a, b in zip(value, value[1:]))


LIMIT_RULES: dict[str, Rule] = {  # services.config's rules of the harness's and the sandbox's sizes, counts and times
    "harness.num_workers": count(1024),
    "harness.save_interval": count(10**9),
    "harness.row_timeout_s": above_up_to(0, 10**7),
    "harness.start_timeout_s": above_up_to(0, 10**6),
    "harness.max_prediction_bytes": count(2**30),
    "harness.data_files": (lambda v: conforms(v, dict[str, str]) and all(k and p for k, p in v.items()),
                           "domain -> data file path"),
    "sandbox.memory_mb": count(2**22),
    "sandbox.pids": count(2**22),
    "sandbox.cpus": above_up_to(0, 4096),
    "sandbox.cpu_seconds": count(10**8),
    "sandbox.file_size_mb": count(2**22),
    "sandbox.tmp_mb": count(2**22),
    "sandbox.output_cap_mb": above_up_to(0, 2**14),
    "sandbox.disk_mb": above_up_to(0, 2**30),
}

TRACKERS = ("mlflow", "wandb", "tensorboard")  # each in optimizer/trackers/, installed as a pip extra of its name
TRACKING_RULES: dict[str, Rule] = {  # services.config's rules of the tracking section
    "tracking.backends": (lambda v: set(v) <= set(TRACKERS) and len(set(v)) == len(v),
                          f"a list of distinct trackers among {', '.join(TRACKERS)}"),
    "tracking.mlflow_uri": uri(("http", "https", "file", "sqlite")),
    "tracking.experiment": (lambda v: bool(v.strip()) and len(v) <= 256, "a name of at most 256 characters"),
    "tracking.wandb_mode": one_of("offline", "online"),
    "tracking.wandb_entity": (lambda v: re.fullmatch(r"[\w.-]{1,128}", v) is not None,
                              "a W&B team or user name (letters, digits, _ . -)"),
    "tracking.text_kb": count(10**5),
}
