"""Curate IMO-GradingBench into the 100/100/100 train/val/test splits, as HyperAgents does.

    python -m domains.imo.curate_subsets PATH [--out DIR]

Keeps rows with Points in {0, 1, 6, 7}, shuffles them, samples 300 and splits
them stratified on Reward, all with seed 42, so a run on upstream's
gradingbench.csv reproduces upstream's rows exactly. Writes
<base>_filtered.csv and <base>_filtered_100_{train,val,test}.csv, where base is
DIR / the input file's stem (DIR defaults to the input's folder).
"""

# pandas' own annotations (no pandas-stubs installed) type a column lookup as anything it could be,
# so this one-off script's indexing reads as errors; its test runs it on the real file.
# pyright: reportAttributeAccessIssue=false, reportArgumentType=false, reportCallIssue=false, reportReturnType=false

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from domains.imo.data import load_csv
from services.cli_parser import ArgumentParser
from services.errors import UserError, exit_on_user_error
from services.fsutil import atomic_write_csv

KEPT_POINTS = (0, 1, 6, 7)
SEED = 42
SUBSET_SIZE = 300
SPLIT_SIZE = 100
REQUIRED_COLUMNS = ("Points", "Reward")
SPLITS = ("train", "val", "test")


def _train_test_split() -> Callable[..., list]:
    # Only curation needs scikit-learn; it is imported here so the rest of the
    # project does not depend on it.
    try:
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise UserError(
            "curate_subsets needs scikit-learn to reproduce the upstream split: pip install -e '.[curate]'"
        ) from None
    return train_test_split


def filter_and_shuffle(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose Points are 0, 1, 6 or 7, in upstream's shuffled order."""
    points = pd.to_numeric(df["Points"], errors="coerce")
    kept = df[points.isin(KEPT_POINTS)]
    return kept.sample(frac=1, random_state=SEED).reset_index(drop=True)


def split_subsets(filtered: pd.DataFrame, source: str | Path = "the input") -> dict[str, pd.DataFrame]:
    """Sample 300 rows and split them 100/100/100, stratified on Reward."""
    if len(filtered) < SUBSET_SIZE:
        raise UserError(
            f"{source} has {len(filtered)} rows with Points in {set(KEPT_POINTS)}; "
            f"curation needs at least {SUBSET_SIZE}"
        )
    train_test_split = _train_test_split()
    subset = filtered.sample(n=SUBSET_SIZE, random_state=SEED).reset_index(drop=True)
    try:
        train, temp = train_test_split(
            subset, test_size=2 * SPLIT_SIZE, random_state=SEED, stratify=subset["Reward"]
        )
        val, test = train_test_split(temp, test_size=SPLIT_SIZE, random_state=SEED, stratify=temp["Reward"])
    except ValueError as e:
        raise UserError(f"cannot split {source} stratified on Reward: {e}") from None
    return {"train": train, "val": val, "test": test}


def output_paths(path: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """{"filtered", "train", "val", "test"} -> where each file is written."""
    path = Path(path)
    base = Path(out_dir if out_dir is not None else path.parent) / path.stem
    paths = {"filtered": Path(f"{base}_filtered.csv")}
    paths.update({split: Path(f"{base}_filtered_{SPLIT_SIZE}_{split}.csv") for split in SPLITS})
    return paths


def curate(path: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Read, filter, split, then write; nothing is written unless every step succeeded."""
    df = load_csv(path, REQUIRED_COLUMNS)
    filtered = filter_and_shuffle(df)
    splits = split_subsets(filtered, source=path)
    frames = {"filtered": filtered, **splits}
    paths = output_paths(path, out_dir)
    try:
        for name, frame in frames.items():
            atomic_write_csv(paths[name], frame)
    except OSError as e:
        raise UserError(f"cannot write the curated subsets: {e}") from None
    print(f"{path}: {len(df)} rows, {len(filtered)} with Points in {set(KEPT_POINTS)} -> {paths['filtered']}")
    for split in SPLITS:
        counts = splits[split]["Reward"].value_counts().sort_index()
        labels = ", ".join(f"{label} {n}" for label, n in counts.items())
        print(f"  {split:<5} {len(splits[split])} rows ({labels}) -> {paths[split]}")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m domains.imo.curate_subsets",
                                description=(__doc__ or "").splitlines()[0])
    p.add_argument("path", type=Path, help="gradingbench.csv (e.g. from `python -m domains.imo.setup`)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: the input's folder)")
    args = p.parse_args(argv)
    curate(args.path, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
