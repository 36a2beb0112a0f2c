"""Service progress reports shown as a tqdm bar."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm

from r2s2r.app.jobs import Progress, ProgressFn


@contextmanager
def progress_bar(total: int, desc: str, unit: str, disable: bool = False) -> Iterator[ProgressFn]:
    """A progress callback that moves one bar to each report's ``done`` and shows its
    message beside it."""
    with tqdm(total=total, desc=desc, unit=unit, disable=disable) as bar:

        def show(p: Progress) -> None:
            bar.update(p.done - bar.n)
            if p.message:
                bar.set_postfix_str(p.message)

        yield show
