"""Answers to real IMO-AnswerBench rows, for the answer checks: right answers written another way, and
near misses that are wrong. Each case names its row; the reference is read from the bundled data set,
so a case cannot drift from the row it was written for.

The named cases of issue 26 come first in each list: `r - 2R` for `R - 2r`, "even n" for "odd n"
(false positives of math-verify alone), `x \\le 0` for `(-\\infty, 0]` and "The answer is: 1/2"
(false negatives).
"""

from __future__ import annotations

from functools import lru_cache

ROW = "imo-bench-{}"

# (row, a right answer written differently from the reference)
RIGHT = [
    ("geometry-008", "R - 2r"), ("geometry-008", "$-2r + R$"), ("geometry-008", r"\boxed{R-2r}"),
    ("algebra-028", r"x \le 0"), ("algebra-028", r"x \leq 0"), ("algebra-028", r"$x\le 0$"),
    ("algebra-028", r"\left(-\infty, 0\right]"),
    ("algebra-012", "The answer is: 1/2"), ("algebra-012", "0.5"), ("algebra-012", r"\boxed{\dfrac{1}{2}}"),
    ("algebra-012", r"**Final Answer:** $\frac12$"),
    ("algebra-069", "even n"), ("algebra-069", "Even $n$"), ("algebra-051", "odd n"),
    ("number_theory-007", "$n$ is prime"), ("number_theory-007", "n is prime."),
    ("number_theory-081", "No solutions"), ("number_theory-079", "all positive integers"),
    ("combinatorics-059", "Taking the empty card."),
    ("algebra-010", r"0, \frac{2}{3}, -\frac{2}{3}"), ("number_theory-063", "12, 4, 2, 1, 0"),
    ("number_theory-063", r"\{0,1,2,4,12\}"), ("number_theory-084", "-3, 5"),
    ("geometry-007", r"\frac{R^2 + rR}{\sqrt{R^2 - 2rR}}"), ("geometry-073", r"\rho/R"),
    ("algebra-072", r"x \ge -\frac{6}{5}"), ("algebra-072", r"[-\frac{6}{5}, \infty)"),
    ("algebra-065", "0 < c < 1"), ("algebra-065", "(0, 1)"), ("number_theory-012", r"n \geq 2"),
    ("algebra-086", r"(0, \frac{4}{9}]"), ("algebra-048", r"-6 \le x \le 5"),
    ("number_theory-015", "(3, 2, 5)"), ("algebra-020", "P(x) = 2x^2 + c"), ("number_theory-075", "P(x)=x-4"),
    ("geometry-034", r"\frac{50A}{39}"), ("number_theory-052", "65537"), ("algebra-096", r"4 \times 3^{2023}"),
    ("geometry-028", r"-2\alpha + 180"), ("algebra-053", r"(-\infty,-3)\cup(-3,+\infty)"),
    ("geometry-017", r"\frac{1}{2}"), ("geometry-032", "7/4"), ("number_theory-051", "13/2"),
    ("algebra-057", r"\frac12, 1, 2"), ("algebra-043", r"-1+\sqrt{2}"), ("geometry-022", "2^{1/2}"),
    ("combinatorics-024", r"-\dfrac{2024}{2025}"), ("number_theory-035", "-1+n"), ("geometry-027", "y + 2x"),
    ("number_theory-026", "2^{n}"), ("algebra-017", r"(-\infty, 0) \cup \{\frac{1}{2}\}"),
    ("algebra-081", "n = 4k+3"), ("geometry-043", r"\frac{3(XZ - XY)}{2}"), ("geometry-023", "h^2 r_1 r_2"),
    ("number_theory-005", r"\mathbb{Z}"),
]

# (row, a wrong answer close to the reference)
WRONG = [
    ("geometry-008", "r - 2R"), ("geometry-008", "2r - R"), ("geometry-008", "R + 2r"),
    ("algebra-069", "odd n"), ("algebra-069", "odd $n$"), ("algebra-051", "even $n$"), ("algebra-051", "even n"),
    ("number_theory-007", "n is composite"), ("number_theory-007", "n is not prime"),
    ("number_theory-081", "infinitely many solutions"),
    ("algebra-028", "x < 0"), ("algebra-028", r"(-\infty, 0)"), ("algebra-028", r"x \ge 0"),
    ("algebra-012", "The answer is: 1/3"), ("algebra-012", "2"),
    ("geometry-073", r"\frac{\rho}{r}"), ("geometry-073", r"\frac{R}{\rho}"),
    ("geometry-007", r"\frac{r^2+Rr}{\sqrt{r^2-2Rr}}"),
    ("number_theory-063", "0, 1, 2, 4"), ("number_theory-063", "0, 1, 2, 4, 12, 13"),
    ("algebra-010", r"-\frac{2}{3}, \frac{2}{3}"), ("number_theory-084", "5, 3"),
    ("algebra-072", r"x > -\frac{6}{5}"), ("algebra-072", r"x \ge \frac{6}{5}"),
    ("algebra-048", "(-6, 5)"), ("algebra-048", "-6 < x < 5"), ("geometry-032", "1.7"),
    ("number_theory-079", "All positive even integers"), ("number_theory-079", "No positive integers"),
    ("combinatorics-064", "All positive integers"), ("number_theory-034", "All powers of 3"),
    ("number_theory-033", "m is prime"), ("algebra-020", "P(x)=2x^2"), ("number_theory-026", "2^{n+1}"),
    ("geometry-023", "r_1 r_2 h"), ("algebra-065", r"0 \le c \le 1"),
    ("geometry-043", r"\frac{3}{2}(XY-XZ)"), ("number_theory-037", "All numbers of the form $4k+1$"),
    ("number_theory-009", "odd prime numbers"),
]


@lru_cache(maxsize=1)
def references() -> dict[str, str]:
    from domains.imo.answerbench_split import SOURCE
    from domains.imo.data import load_csv

    df = load_csv(SOURCE, ["Problem ID", "Problem", "Short Answer"])
    return dict(zip(df["Problem ID"], df["Short Answer"]))


def problems() -> dict[str, str]:
    from domains.imo.answerbench_split import SOURCE
    from domains.imo.data import load_csv

    df = load_csv(SOURCE, ["Problem ID", "Problem"])
    return dict(zip(df["Problem ID"], df["Problem"]))


def truth(row: str) -> str:
    return references()[ROW.format(row)]
