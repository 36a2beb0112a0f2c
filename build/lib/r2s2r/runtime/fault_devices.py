"""Devices that fail the way real ones do, for fault injection (``r2s2r.runtime.faults``):
a camera whose frames stop updating, and a rig that carries such cameras."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from r2s2r.rig.interfaces import (
    Arm,
    Camera,
    Conveyor,
    DepthCamera,
    Frame,
    Hand,
    HandTracker,
    ObjectPresenter,
    Rig,
)
from r2s2r.sim.embodiment import Embodiment


class FrozenCamera:
    """A camera whose frames stop updating while ``frozen``: it delivers the frame it held
    when it froze (its stamp too), as a stalled driver does."""

    def __init__(self, camera: Camera) -> None:
        self.inner, self.name = camera, camera.name
        self._frozen: Frame | None = None
        self._frozen_depth: Frame | None = None

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    def freeze(self) -> None:
        if self._frozen is None:
            self._frozen = self.inner.read()
            if isinstance(self.inner, DepthCamera):
                self._frozen_depth = self.inner.read_depth()

    def thaw(self) -> None:
        self._frozen = self._frozen_depth = None

    def intrinsics(self) -> Any:
        return self.inner.intrinsics()

    def read(self) -> Frame:
        return self._frozen if self._frozen is not None else self.inner.read()

    def read_depth(self) -> Frame:
        if not isinstance(self.inner, DepthCamera):
            raise ValueError(f"{self.name} has no depth")
        if self._frozen_depth is not None:
            return self._frozen_depth
        return self.inner.read_depth()


class FaultyRig:
    """``rig`` with some cameras replaced by ``FrozenCamera``s; everything else is the rig's."""

    def __init__(self, rig: Rig, cameras: Sequence[str]) -> None:
        self.inner = rig
        self.frozen = {name: FrozenCamera(rig.cameras[name]) for name in cameras}
        self._cameras: dict[str, Camera] = {**rig.cameras, **self.frozen}

    @property
    def embodiment(self) -> Embodiment:
        return self.inner.embodiment

    @property
    def arms(self) -> Mapping[str, Arm]:
        return self.inner.arms

    @property
    def hands(self) -> Mapping[str, Hand]:
        return self.inner.hands

    @property
    def cameras(self) -> Mapping[str, Camera]:
        return self._cameras

    @property
    def trackers(self) -> Mapping[str, HandTracker]:
        return self.inner.trackers

    @property
    def conveyor(self) -> Conveyor:
        return self.inner.conveyor

    @property
    def presenter(self) -> ObjectPresenter:
        return self.inner.presenter

    @property
    def realtime(self) -> bool:
        return bool(getattr(self.inner, "realtime", True))

    def depth_camera(self) -> DepthCamera:
        depth = self.inner.depth_camera()
        frozen = self.frozen.get(depth.name)
        return frozen if frozen is not None else depth

    def now(self) -> float:
        return self.inner.now()

    def step(self, periods: int = 1) -> None:
        self.inner.step(periods)

    def present(self, object_name: str | None = None) -> str:
        return self.inner.present(object_name)

    def episode_outcome(self) -> tuple[str, bool, bool] | None:
        return self.inner.episode_outcome()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> FaultyRig:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
