"""Read a CSV of daily temperatures and report the hottest day (an unfinished file: the demo
completes its last line)."""

import csv
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Day:
    date: str
    high: float
    low: float


def read_days(path: Path) -> list[Day]:
    with open(path, newline="") as f:
        return [Day(row["date"], float(row["high"]), float(row["low"])) for row in csv.DictReader(f)]


def hottest(days: list[Day]) -> Day:
    return max(days, key=lambda day: 
