"""What a tracker is told, as plain data: a node's numbers, its record for a person, the run's
parameters. Pure functions; the backends (MLflow, W&B, TensorBoard) only carry it.

A node's error, screening lines and patch were written or provoked by agent code: each is cut to
a bound before it leaves, so a tracker's store holds at most a known amount per node."""

from __future__ import annotations

import re

from archive.records import Node, Status

ERROR_CHARS = 2000  # an error or screening line as a tracker shows it
DROPPED_LISTED = 20  # dropped file names listed in a node's record (all are in node.json)
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-./ ]")  # what no tracker takes in a metric name (MLflow's rule, the strictest)


def key(*parts: str) -> str:
    """A metric or parameter name made of names a user chose (domains, splits, roles)."""
    return "/".join(_UNSAFE.sub("_", str(p)) or "_" for p in parts)


def cut(text: str | None, limit: int) -> str | None:
    """`text` within `limit` characters, saying how much was left out."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut for the tracker]"


def node_metrics(node: Node) -> dict[str, float]:
    """Every number of a node: scores per domain and split with their rows and 95% interval, cost and
    tokens per role, wall time per phase, its generation, and whether it is a valid parent."""
    found: dict[str, float] = {"generation": float(node.generation), "valid": float(node.status == Status.OK)}
    for domain, split, evaluation in node.evaluations():
        if evaluation.score is None:
            continue
        found[key(domain, split, "score")] = float(evaluation.score)
        if evaluation.rows is not None:
            found[key(domain, split, "rows")] = float(evaluation.rows)
        if evaluation.interval:
            low, high = evaluation.interval
            found[key(domain, split, "ci95_low")], found[key(domain, split, "ci95_high")] = float(low), float(high)
    for role, usd in node.cost_usd.items():
        found[key("cost_usd", role)] = float(usd)
    for role, tokens in node.tokens.items():
        found[key("tokens", role)] = float(tokens)
    found["cost_usd/total"] = float(sum(node.cost_usd.values()))
    for phase, seconds in node.seconds.items():
        found[key("seconds", phase)] = float(seconds)
    return found


def best_metrics(node: Node) -> dict[str, float]:
    """The best node's scores, under best/, as the run's curve of its best so far."""
    return {f"best/{name}": value for name, value in node_metrics(node).items()
            if name.endswith(("/score", "/ci95_low", "/ci95_high"))}


def node_record(node: Node) -> dict:
    """The node for a person reading the tracker: lineage, status, the bounded error and verdicts."""
    patch = node.patch or {}
    dropped = [str(name)[:200] for name in (patch.get("dropped") or [])]
    return {"node_id": node.node_id, "parent": node.parent, "generation": node.generation,
            "status": str(node.status), "error": cut(node.error, ERROR_CHARS),
            "meta_error": cut(node.meta_error, ERROR_CHARS), "flags": [cut(f, ERROR_CHARS) for f in node.flags],
            "scores": node.scores, "rows": node.samples, "intervals": node.intervals, "full_eval": node.full_eval,
            "screening": {d: [cut(line, ERROR_CHARS) for line in lines] for d, lines in node.screening.items()},
            "cost_usd": node.cost_usd, "tokens": node.tokens, "seconds": node.seconds,
            "patch": {"files": patch.get("files", 0), "insertions": patch.get("insertions", 0),
                      "deletions": patch.get("deletions", 0), "dropped": dropped[:DROPPED_LISTED],
                      "dropped_count": len(dropped)},
            "created_at": node.created_at}


def flat_params(data: dict, prefix: str = "") -> dict[str, str]:
    """A nested config as `section.key -> value` text, the shape trackers keep parameters in."""
    flat: dict[str, str] = {}
    for name, value in data.items():
        dotted = prefix + (_UNSAFE.sub("_", str(name)) or "_")
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, dotted + "."))
        else:
            flat[dotted] = str(value)
    return flat
