"""The parts of the real cell that a person operates: the belt speed and placing objects."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

Prompt = Callable[[str], str]


class ManualConveyor:
    """The belt, set by the operator (the ``Conveyor`` interface).

    ``set_speed`` asks the operator to set the belt and records the speed they confirm: Enter
    accepts the requested speed, a number records the speed actually set.
    """

    def __init__(self, prompt: Prompt = input, initial_speed: float = 0.0) -> None:
        self._prompt = prompt
        self._speed = float(initial_speed)
        self.history: list[tuple[float, float]] = []  # (requested, recorded) m/s

    def set_speed(self, speed: float) -> None:
        speed = float(speed)
        if not math.isfinite(speed) or speed < 0:
            raise ValueError(f"belt speed must be finite and non-negative, got {speed!r}")
        question = (
            f"Set the belt to {speed:.3f} m/s, then press Enter "
            "(or type the speed you set, in m/s): "
        )
        while True:
            reply = self._prompt(question).strip()
            if not reply:
                recorded = speed
                break
            try:
                recorded = float(reply)
            except ValueError:
                question = f"{reply!r} is not a speed; type it in m/s, or press Enter: "
                continue
            if math.isfinite(recorded) and recorded >= 0:
                break
            question = "The speed must be a non-negative number of m/s: "
        self._speed = recorded
        self.history.append((speed, recorded))

    def speed(self) -> float:
        return self._speed


class OperatorPresenter:
    """Asks the operator to put an object on the belt (the ``ObjectPresenter`` interface).

    With a name, the operator places that object and confirms with Enter; without one they
    place any object and type its name, which must be one of ``object_names``.
    """

    def __init__(self, object_names: Sequence[str], prompt: Prompt = input) -> None:
        self.object_names = tuple(object_names)
        self._prompt = prompt

    def present(self, object_name: str | None = None) -> str:
        if object_name is not None:
            if object_name not in self.object_names:
                raise ValueError(
                    f"unknown object {object_name!r}; the task has {self.object_names}"
                )
            self._prompt(f"Place the {object_name} at the belt's upstream end, then press Enter: ")
            return object_name
        question = (
            "Place an object at the belt's upstream end and type its name "
            f"({', '.join(self.object_names)}): "
        )
        while True:
            reply = self._prompt(question).strip()
            if reply in self.object_names:
                return reply
            question = f"{reply!r} is not an object of the task; type one of the names above: "

    def object_pose(self) -> np.ndarray | None:
        """None: the real cell has no object tracker yet."""
        return None

    def place_board(self, placement: int) -> None:
        self._prompt(
            f"Board placement {placement + 1}: prop the calibration board up over the belt in a "
            "new pose (tilted 15-40 degrees, a different place and tilt from before, fully in "
            "the head camera's view), then press Enter: "
        )

    def remove_board(self) -> None:
        self._prompt("Take the calibration board out of the cell, then press Enter: ")
