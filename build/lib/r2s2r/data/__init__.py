"""Datasets: recording, reading, checking and exporting LeRobot v3 datasets."""

from r2s2r.data.config import CameraCfg, DatasetCfg, DatasetError, VideoCfg
from r2s2r.data.reader import Dataset
from r2s2r.data.robomimic import export_robomimic
from r2s2r.data.verify import Report, verify
from r2s2r.data.writer import DatasetWriter

__all__ = [
    "CameraCfg",
    "Dataset",
    "DatasetCfg",
    "DatasetError",
    "DatasetWriter",
    "Report",
    "VideoCfg",
    "export_robomimic",
    "verify",
]
