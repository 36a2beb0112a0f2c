"""Datasets: recording, reading, checking and exporting LeRobot v3 datasets."""

from r2s2r.data.config import (
    ACTION_DIM,
    ENV_STATE_DIM,
    STATE_DIM,
    CameraCfg,
    DatasetCfg,
    DatasetError,
    VideoCfg,
    action_names,
    state_names,
)
from r2s2r.data.reader import Dataset
from r2s2r.data.robomimic import export_robomimic
from r2s2r.data.verify import Report, verify
from r2s2r.data.writer import DatasetWriter, proprio

__all__ = [
    "ACTION_DIM",
    "ENV_STATE_DIM",
    "STATE_DIM",
    "CameraCfg",
    "Dataset",
    "DatasetCfg",
    "DatasetError",
    "DatasetWriter",
    "Report",
    "VideoCfg",
    "action_names",
    "export_robomimic",
    "proprio",
    "state_names",
    "verify",
]
