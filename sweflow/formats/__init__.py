"""Dataset formats: the task sets people train and evaluate on, each read, given an environment
and graded the way its own project does (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym, SWE-rebench,
sweflow's own). One module per format, one line in ``registry.FORMATS``.

from sweflow.envcache.dataset import Dataset
data = Dataset.load("R2E-Gym/R2E-Gym-Subset:train", format="auto")   # or a file, a folder
row = data.rows[0]; data.specs; data.images[row.instance_id]; grading_of(row)
"""

from sweflow.formats.base import DatasetFormat, FormatError, FormatGrading, source_row
from sweflow.formats.registry import (
    AUTO,
    FORMATS,
    FormatName,
    check_format_name,
    describe_formats,
    detect_format,
    format_of,
    formats_help,
    get_format,
    grading_of,
    recipes_for,
    row_mapper,
)

__all__ = [
    "AUTO",
    "FORMATS",
    "DatasetFormat",
    "FormatError",
    "FormatGrading",
    "FormatName",
    "check_format_name",
    "describe_formats",
    "detect_format",
    "format_of",
    "formats_help",
    "get_format",
    "grading_of",
    "recipes_for",
    "row_mapper",
    "source_row",
]
