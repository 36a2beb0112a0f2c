"""What a dataset holds: its configuration, feature names and feature schema.

The schema follows LeRobot's dataset v3.0 ``info.json`` conventions: every feature has a
``dtype``, a ``shape`` and ``names``; camera streams are ``video`` features keyed
``observation.images.<camera>``. The state and action features are those of the dataset's
contract (``r2s2r.sim.contract``): its embodiment, action mode and cameras.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from r2s2r.sim.contract import ENV_STATE_DIM, ENV_STATE_NAMES, Contract
from r2s2r.sim.embodiment import Embodiment, EmbodimentError
from r2s2r.sim.scene import nominal_embodiment
from r2s2r.spec import Spec, SpecError
from r2s2r.spec.base import Pos, PosInt
from r2s2r.spec.world import CAMERA_NAMES

CODEBASE_VERSION = "v3.0"
# Files per chunk folder, as in LeRobot.
CHUNKS_SIZE = 1000
STATE_KEY = "observation.state"
ACTION_KEY = "action"
# LeRobot's key for the state of the environment (here: the presented object's pose).
ENV_STATE_KEY = "observation.environment_state"
IMAGE_PREFIX = "observation.images."
# Columns that every frame row carries besides the features.
INDEX_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


class DatasetError(ValueError):
    """A dataset folder or a frame that does not match what the dataset expects."""


class CameraCfg(Spec):
    """One camera stream."""

    # Short name, as in the env's ``images`` dict; the feature key is ``observation.images.<name>``.
    name: str
    height: int = 256
    width: int = 256

    @property
    def key(self) -> str:
        return IMAGE_PREFIX + self.name


class VideoCfg(Spec):
    """How camera streams are encoded (H.264 through PyAV)."""

    # ``lossless`` stores exact RGB (libx264rgb, qp 0); files are several times larger.
    lossless: bool = False
    # Constant rate factor of the lossy encoder (lower is better and larger).
    crf: Annotated[int, Field(ge=0, le=51)] = 23
    preset: str = "veryfast"
    # Keyframe interval in frames: random access decodes at most this many frames.
    gop: PosInt = 10


class FilesCfg(Spec):
    """How many episodes share a data file and a video file (a group, see ``r2s2r.data.groups``).

    A group is closed, its episodes' files joined into one data file and one video file per
    camera, once the next episode would take its data past ``data_mb`` or one of its videos
    past ``video_mb`` (LeRobot v3's ``data_files_size_in_mb`` / ``video_files_size_in_mb``,
    whose defaults these are), once it holds ``episodes`` episodes, or when the writer closes.
    ``episodes=1`` gives one file per episode per camera.
    """

    data_mb: Pos = 100.0
    video_mb: Pos = 200.0
    episodes: PosInt | None = None


class DatasetCfg(Spec):
    """A dataset's fixed properties, written to ``meta/info.json`` when it is created."""

    fps: int = 50
    cameras: tuple[CameraCfg, ...] = tuple(CameraCfg(name=n) for n in CAMERA_NAMES)
    # The robot recorded (its name is LeRobot's ``robot_type``): the state and action names
    # and sizes are its, and the dataset keeps its limits.
    embodiment: Embodiment = Field(default_factory=nominal_embodiment)
    action_mode: Literal["tcp", "joint"] = "tcp"
    video: VideoCfg = VideoCfg()
    # Whether frames carry ``observation.environment_state``: the presented object's pose,
    # where the rig (or simulator) can track it. Demo adaptation needs it.
    env_state: bool = False
    # How episodes are grouped into files: a writer setting, not a property of what the
    # dataset holds (a reopened dataset may continue with other limits).
    files: FilesCfg = FilesCfg()

    @model_validator(mode="after")
    def _check(self) -> DatasetCfg:
        if self.fps <= 0:
            raise ValueError(f"fps must be positive, got {self.fps}")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")
        for cam in self.cameras:
            if cam.height % 2 or cam.width % 2 or cam.height <= 0 or cam.width <= 0:
                raise ValueError(
                    f"camera {cam.name!r}: H.264 needs positive even sizes, "
                    f"got {cam.width}x{cam.height}"
                )
        self.embodiment.action_dim(self.action_mode)  # Validates the mode.
        return self

    def same_content(self, other: DatasetCfg) -> bool:
        """Whether ``other`` describes the same frames (everything but ``files``)."""
        return self.replace(files=other.files) == other

    @property
    def robot_type(self) -> str:
        return self.embodiment.name

    @property
    def contract(self) -> Contract:
        """What the dataset's frames hold: its embodiment, action mode and cameras."""
        return Contract.of(self.embodiment, self.action_mode, tuple(c.name for c in self.cameras))

    def features(self) -> dict[str, dict[str, Any]]:
        """The ``features`` block of ``info.json``."""
        v = self.video
        feats: dict[str, dict[str, Any]] = {}
        for cam in self.cameras:
            feats[cam.key] = {
                "dtype": "video",
                "shape": [cam.height, cam.width, 3],
                "names": ["height", "width", "channels"],
                "info": {
                    "video.height": cam.height,
                    "video.width": cam.width,
                    "video.codec": "h264",
                    "video.pix_fmt": "gbrp" if v.lossless else "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": 3,
                    "video.lossless": v.lossless,
                    "video.crf": 0 if v.lossless else v.crf,
                    "video.g": v.gop,
                    "has_audio": False,
                },
            }
        contract = self.contract
        feats[STATE_KEY] = {
            "dtype": "float32",
            "shape": [contract.state_dim],
            "names": contract.state_names(),
        }
        feats[ACTION_KEY] = {
            "dtype": "float32",
            "shape": [contract.action_dim],
            "names": contract.action_names(),
        }
        if self.env_state:
            feats[ENV_STATE_KEY] = {
                "dtype": "float32",
                "shape": [ENV_STATE_DIM],
                "names": list(ENV_STATE_NAMES),
            }
        feats["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
        for key in INDEX_KEYS[1:]:
            feats[key] = {"dtype": "int64", "shape": [1], "names": None}
        return feats

    @property
    def vector_keys(self) -> tuple[str, ...]:
        """The per-frame vector features: state, action and, if present, environment state."""
        return (STATE_KEY, ACTION_KEY, *((ENV_STATE_KEY,) if self.env_state else ()))

    def to_json(self) -> dict[str, Any]:
        """This config as stored under ``r2s2r`` in ``info.json`` (to reopen the dataset)."""
        return {**self.model_dump(exclude={"embodiment"}), "embodiment": self.embodiment.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DatasetCfg:
        """The inverse of ``to_json``. Datasets written before ``env_state`` lack it; those
        written before datasets recorded their embodiment name it in ``robot_type``, which
        must then be the nominal cell's robot."""
        data = {"env_state": False, **data}
        robot_type = data.pop("robot_type", None)
        if "embodiment" in data:
            try:
                data["embodiment"] = Embodiment.from_json(data["embodiment"])
            except (EmbodimentError, KeyError, TypeError, ValueError) as err:
                raise DatasetError(f"info.json: r2s2r.embodiment: {err}") from None
        else:
            nominal = nominal_embodiment()
            if robot_type != nominal.name:
                raise DatasetError(
                    f"info.json: the r2s2r block records no embodiment and its robot_type "
                    f"{robot_type!r} is not the nominal cell's ({nominal.name!r}): it cannot "
                    "be checked against an env or a rig"
                )
            data["embodiment"] = nominal
        try:
            return cls.from_dict(data, source="info.json (r2s2r)")
        except SpecError as err:
            raise DatasetError(str(err)) from None


# Per-episode metadata columns of this project (beyond LeRobot's), with their Arrow types.
EPISODE_META_FIELDS: dict[str, str] = {
    "world": "string",
    "behavior": "string",
    "source_demo": "string",
    "belt_speed": "float64",
    "object_ids": "list<string>",
    "seed": "int64",
    "embodiment_id": "int64",
    # Deployments and evaluation trials (``r2s2r.runtime.record``): the trial's index in its
    # protocol, its condition, and how it ended.
    "trial": "int64",
    "condition": "string",
    "outcome": "string",
}
